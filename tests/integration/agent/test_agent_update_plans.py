"""pko's agent-protocol additions for approvals and destroy protection, on the real Pulumi CLI: the agent announces
them on SelectStack; a preview saves its plan under its SHA-256; an `up` applies only a saved plan it finds by that
digest, once; a preview-only destroy deletes nothing and names what it would delete."""

from __future__ import annotations

import re
from pathlib import Path

import grpc
import pytest
from agent_testlib import AgentFactory, config_item, copy_program, drive

from pko.protocol.proto import agent_pb2

pytestmark = pytest.mark.pulumi

PROJECT = "name: plans\nruntime: yaml\nconfig:\n  greeting:\n    type: string\n    default: hello\n" \
          "outputs:\n  greeting: ${greeting}\n"


async def test_plans_are_saved_applied_once_and_a_destroy_preview_deletes_nothing(
    tmp_path: Path, start_agent: AgentFactory,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "Pulumi.yaml").write_text(PROJECT)
    agent = await start_agent(workspace)
    stub = agent.stub

    select = stub.SelectStack(agent_pb2.SelectStackRequest(stack_name="dev", create=True))
    await select
    announced = ("pko-agent-capabilities", "update-plans,destroy-preview,resume-update,keep-running")
    assert announced in tuple(await select.initial_metadata())

    preview = await drive(stub.Preview(agent_pb2.PreviewRequest(save_plan=True)))
    assert preview.error is None, preview.error
    digest = preview.result.plan_digest
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert dict(preview.result.change_summary) == {"create": 1}
    assert (workspace / ".pko-plans" / f"{digest}.json").is_file()

    wrong = await drive(stub.Up(agent_pb2.UpRequest(plan_digest="0" * 64)))
    assert wrong.error is not None
    assert wrong.error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "a new preview is needed" in (wrong.error.details() or "")

    up = await drive(stub.Up(agent_pb2.UpRequest(plan_digest=digest)))
    assert up.error is None, up.error
    assert up.result.summary.result == "succeeded"
    assert not (workspace / ".pko-plans" / f"{digest}.json").exists()
    again = await drive(stub.Up(agent_pb2.UpRequest(plan_digest=digest)))
    assert again.error is not None
    assert again.error.code() == grpc.StatusCode.FAILED_PRECONDITION

    destroy = await drive(stub.Destroy(agent_pb2.DestroyRequest(preview_only=True, remove=True)))
    assert destroy.error is None, destroy.error
    assert dict(destroy.result.change_summary) == {"delete": 1}
    assert [urn.rsplit("::", 1)[-1] for urn in destroy.result.resources] == ["plans-dev"]
    assert re.fullmatch(r"[0-9a-f]{64}", destroy.result.plan_digest)
    info = await stub.Info(agent_pb2.InfoRequest())  # the stack is still there, with its resource
    assert info.summary.name == "dev"
    assert info.summary.resource_count == 1


DRIFTING_PROGRAM = '''
config = pulumi.Config()
# what the update writes is read when the program runs: it can differ between the preview and the up
target = File("greeting", path=config.require("path"), content=open(config.require("source")).read())
pulumi.export("content", target.content)
'''


async def test_an_up_that_would_differ_from_the_reviewed_plan_is_refused_by_pulumi(
    tmp_path: Path, start_agent: AgentFactory,
) -> None:
    """The approved `up` runs with `--plan`: Pulumi itself refuses an update whose changes differ from the saved
    plan, and applies nothing. Without `--plan` reaching the CLI, the changed content would be written."""
    workspace = copy_program("dynamic-python", tmp_path / "ws")
    main = workspace / "__main__.py"
    main.write_text(main.read_text().split("config = pulumi.Config()")[0] + DRIFTING_PROGRAM)
    target, source = tmp_path / "managed.txt", tmp_path / "source.txt"
    source.write_text("reviewed")
    agent = await start_agent(workspace)
    stub = agent.stub
    await stub.SelectStack(agent_pb2.SelectStackRequest(stack_name="dev", create=True))
    await stub.SetAllConfig(agent_pb2.SetAllConfigRequest(config=[
        config_item("path", str(target)), config_item("source", str(source))]))

    preview = await drive(stub.Preview(agent_pb2.PreviewRequest(save_plan=True)))
    assert preview.error is None, preview.error
    source.write_text("changed after the review")  # the program's up would now differ from the reviewed preview

    up = await drive(stub.Up(agent_pb2.UpRequest(plan_digest=preview.result.plan_digest)))
    text = (up.error.details() if up.error is not None else up.result.summary.message) or ""
    assert up.error is not None or up.result.summary.result == "failed", up
    assert "plan" in text.lower(), text
    assert not target.exists() or target.read_text() != "changed after the review"
