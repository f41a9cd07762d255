"""The agent, driven through our generated stub, runs the whole workspace life cycle on the real Pulumi CLI:
Install → SelectStack(create) → SetAllConfig (plain, secret, path, JSON object, valueFrom env and file) → Up →
outputs (secret ones flagged) → Refresh → Preview(expect_no_changes) → Destroy, for a Python program with a
dynamic-provider resource and for a Pulumi YAML program; and failures come back as the reference sends them.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import grpc
import pytest
from agent_testlib import Agent, AgentFactory, config_item, copy_program, drive

from pko.protocol import client
from pko.protocol.proto import agent_pb2

pytestmark = pytest.mark.pulumi


def outputs(result: agent_pb2.UpResult) -> dict[str, tuple[object, bool]]:
    return {key: (json.loads(out.value), out.secret) for key, out in result.outputs.items()}


async def select(agent: Agent, stack: str = "dev") -> agent_pb2.SelectStackResult:
    return await agent.stub.SelectStack(agent_pb2.SelectStackRequest(stack_name=stack, create=True))


async def test_python_program_full_cycle(tmp_path: Path, start_agent: AgentFactory) -> None:
    workspace = copy_program("dynamic-python", tmp_path / "ws")
    target = tmp_path / "greeting.txt"
    secret_file = tmp_path / "password.txt"
    secret_file.write_text("from-a-file")
    agent = await start_agent(workspace, env={"PKO_TEST_VALUE": "from-the-env"})
    stub = agent.stub

    await stub.Install(agent_pb2.InstallRequest())
    selected = await select(agent)
    assert selected.summary.name == "dev"
    await stub.SetAllConfig(agent_pb2.SetAllConfigRequest(config=[
        config_item("path", str(target)),
        config_item("greeting", "hello from the agent"),
        config_item("token", "s3cr3t", secret=True),
        config_item("tags.env", "prod", path=True),
        config_item("tags.team", "platform", path=True),
        config_item("settings", {"replicas": 2, "zones": ["a", "b"], "debug": False}),
        config_item("replicas", 3),
        config_item("fromEnv", env="PKO_TEST_VALUE"),
        config_item("fromFile", file=str(secret_file), secret=True),
    ]))
    assert not (workspace / "Pulumi.dev.yaml").read_text().count("s3cr3t")  # secrets are stored encrypted

    up = await drive(stub.Up(agent_pb2.UpRequest(message="first")))
    assert up.error is None, up.error
    assert up.order[-1] == "result"
    assert up.order.count("result") == 1
    assert len(up.events) > 3
    assert {"preludeEvent", "resourcePreEvent", "resOutputsEvent", "summaryEvent"} <= up.event_kinds()
    assert all("sequence" in event and "timestamp" in event for event in up.events)
    assert up.result.summary.result == "succeeded"
    assert up.result.summary.message == "first"
    assert up.result.summary.start_time.seconds > 0
    assert up.result.project_info == agent_pb2.ProjectInfo(name="dynamic-python", runtime="python")
    assert target.read_text() == "hello from the agent"
    assert outputs(up.result) == {
        "path": (str(target), False),
        "content": ("hello from the agent", False),
        "token": ("s3cr3t", True),
        "tags": ({"env": "prod", "team": "platform"}, False),
        "settings": ({"replicas": 2, "zones": ["a", "b"], "debug": False}, False),
        "replicas": (3, False),
        "fromEnv": ("from-the-env", False),
        "fromFile": ("from-a-file", True),
    }
    assert "s3cr3t" not in up.result.stdout

    info = await stub.Info(agent_pb2.InfoRequest())
    assert info.summary.name == "dev"
    assert info.summary.resource_count == 3  # stack, dynamic provider, file

    target.write_text("changed behind pulumi's back")
    refresh = await drive(stub.Refresh(agent_pb2.RefreshRequest()))
    assert refresh.error is None, refresh.error
    assert refresh.result.summary.result == "succeeded"
    assert refresh.events

    target.write_text("hello from the agent")
    await drive(stub.Refresh(agent_pb2.RefreshRequest()))
    preview = await drive(stub.Preview(agent_pb2.PreviewRequest(expect_no_changes=True)))
    assert preview.error is None, preview.error
    assert preview.order[-1] == "result"
    assert preview.result.project_info.name == "dynamic-python"
    summary = [e["summaryEvent"] for e in preview.events if "summaryEvent" in e]
    assert summary
    assert summary[0]["resourceChanges"] == {"same": 2}  # the stack and the file

    await stub.SetAllConfig(agent_pb2.SetAllConfigRequest(config=[config_item("greeting", "changed")]))
    changed = await drive(stub.Preview(agent_pb2.PreviewRequest(expect_no_changes=True)))
    assert changed.error is not None
    assert changed.error.code() == grpc.StatusCode.UNKNOWN
    assert changed.error.details().startswith("preview failed: ")
    assert target.read_text() == "hello from the agent"  # a preview changes nothing

    destroy = await drive(stub.Destroy(agent_pb2.DestroyRequest()))
    assert destroy.error is None, destroy.error
    assert destroy.result.summary.result == "succeeded"
    assert not target.exists()


async def test_yaml_program_full_cycle(tmp_path: Path, start_agent: AgentFactory) -> None:
    workspace = copy_program("config-yaml", tmp_path / "ws")
    value_file = tmp_path / "value.txt"
    value_file.write_text("file-value")
    agent = await start_agent(workspace, env={"PKO_TEST_VALUE": "env-value"})
    stub = agent.stub

    await stub.Install(agent_pb2.InstallRequest())
    await select(agent)
    await stub.SetAllConfig(agent_pb2.SetAllConfigRequest(config=[
        config_item("greeting", "hello"),
        config_item("token", "hush", secret=True),
        config_item("settings", {"nested": {"enabled": True}, "list": [1, 2]}),
        config_item("replicas", 2),
        config_item("fromEnv", env="PKO_TEST_VALUE"),
        config_item("config-yaml:fromFile", file=str(value_file)),
    ]))

    up = await drive(stub.Up(agent_pb2.UpRequest()))
    assert up.error is None, up.error
    assert up.order[-1] == "result"
    assert up.events
    assert up.result.project_info == agent_pb2.ProjectInfo(name="config-yaml", runtime="yaml")
    assert outputs(up.result) == {
        "message": ("hello, world", False),
        "token": ("hush", True),
        "settings": ({"nested": {"enabled": True}, "list": [1, 2]}, False),
        "replicas": (2, False),
        "fromEnv": ("env-value", False),
        "fromFile": ("file-value", False),
    }

    refresh = await drive(stub.Refresh(agent_pb2.RefreshRequest(run_program=True)))
    assert refresh.error is None, refresh.error
    preview = await drive(stub.Preview(agent_pb2.PreviewRequest(expect_no_changes=True)))
    assert preview.error is None, preview.error

    destroy = await drive(stub.Destroy(agent_pb2.DestroyRequest(remove=True)))
    assert destroy.error is None, destroy.error
    assert destroy.result.summary.result == "succeeded"
    with pytest.raises(grpc.aio.AioRpcError) as removed:  # the stack is gone and no stack is selected
        await stub.Info(agent_pb2.InfoRequest())
    assert removed.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_failing_program_streams_events_then_fails(tmp_path: Path, start_agent: AgentFactory) -> None:
    agent = await start_agent(copy_program("failing-python", tmp_path / "ws"))
    await select(agent)

    up = await drive(agent.stub.Up(agent_pb2.UpRequest()))

    assert up.result is None
    assert up.events, "engine events must arrive before the failure"
    assert "diagnosticEvent" in up.event_kinds()
    assert up.error is not None
    assert up.error.code() == grpc.StatusCode.UNKNOWN
    assert up.error.details().startswith("up failed: failed to run update: exit status")
    assert "this program fails on purpose: code 4242" in up.error.details()
    assert client.error_info(up.error.trailing_metadata()) is None  # not a known error: no PulumiErrorInfo


async def test_stack_selection_and_argument_errors(tmp_path: Path, start_agent: AgentFactory) -> None:
    workspace = copy_program("config-yaml", tmp_path / "ws")
    agent = await start_agent(workspace)
    stub = agent.stub

    async def code(call: object) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await call  # type: ignore[misc]
        return failure.value.code(), failure.value.details() or ""

    assert await code(stub.Info(agent_pb2.InfoRequest())) == (grpc.StatusCode.FAILED_PRECONDITION,
                                                                "no stack is selected")
    assert await code(stub.SelectStack(agent_pb2.SelectStackRequest(stack_name=""))) == (
        grpc.StatusCode.INVALID_ARGUMENT, "invalid stack name")
    assert await code(stub.SelectStack(agent_pb2.SelectStackRequest(stack_name="missing"))) == (
        grpc.StatusCode.NOT_FOUND, "stack not found")
    up = await drive(stub.Up(agent_pb2.UpRequest()))
    assert up.error is not None
    assert up.error.code() == grpc.StatusCode.FAILED_PRECONDITION

    created = await stub.SelectStack(agent_pb2.SelectStackRequest(stack_name="prod", create=True,
                                                                  secrets_provider="passphrase"))
    assert created.summary.name == "prod"
    assert "encryptionsalt" in (workspace / "Pulumi.prod.yaml").read_text()

    status, message = await code(stub.SetAllConfig(agent_pb2.SetAllConfigRequest(config=[
        config_item("greeting", env="PKO_DEFINITELY_UNSET")])))
    assert status == grpc.StatusCode.INVALID_ARGUMENT
    assert message.endswith("missing value for environment variable: PKO_DEFINITELY_UNSET")
    status, message = await code(stub.SetAllConfig(agent_pb2.SetAllConfigRequest(config=[
        config_item("greeting", file=str(tmp_path / "nope"))])))
    assert (status, message.endswith(f"unreadable path: {tmp_path / 'nope'}")) == (
        grpc.StatusCode.INVALID_ARGUMENT, True)
    status, message = await code(stub.SetAllConfig(agent_pb2.SetAllConfigRequest(config=[
        config_item("settings", {"a": 1}, path=True)])))
    assert (status, message) == (grpc.StatusCode.INVALID_ARGUMENT,
                                 'config item "settings": path=true is incompatible with JSON values')

    # ESC environments need Pulumi Cloud; with a file backend the CLI's refusal comes back as UNKNOWN.
    status, message = await code(stub.AddEnvironments(agent_pb2.AddEnvironmentsRequest(environment=["org/env"])))
    assert status == grpc.StatusCode.UNKNOWN
    assert "does not support environments" in message

    version = await stub.PulumiVersion(agent_pb2.PulumiVersionRequest())
    assert version.version == "3.259.0"
    whoami = await stub.WhoAmI(agent_pb2.WhoAmIRequest())
    assert whoami.url.startswith("file://")
    assert whoami.user


async def test_serve_selects_its_stack_and_loads_the_env_file(tmp_path: Path, start_agent: AgentFactory) -> None:
    workspace = copy_program("config-yaml", tmp_path / "ws")
    env_file = tmp_path / ".env"
    env_file.write_text('PULUMI_CONFIG_PASSPHRASE="from the env file"\n')
    link = tmp_path / "workspace-link"
    link.symlink_to(workspace)
    agent = await start_agent(link, "--stack", "staging", "--env-file", str(env_file), skip_install=False)

    info = await agent.stub.Info(agent_pb2.InfoRequest())
    assert info.summary.name == "staging"
    assert f"opened a local workspace {workspace}" in agent.log()  # symlinks resolved
    await agent.stub.SetAllConfig(agent_pb2.SetAllConfigRequest(config=[config_item("token", "t", secret=True)]))
    # The stack's secrets were encrypted with the passphrase from the env file, not the test's default one.
    env_file_passphrase = {**agent.env, "PULUMI_CONFIG_PASSPHRASE": "from the env file"}
    read = await asyncio.to_thread(config_get, workspace, env_file_passphrase)
    assert (read.returncode, read.stdout.strip()) == (0, "t"), read.stderr
    wrong = await asyncio.to_thread(config_get, workspace, agent.env)
    assert wrong.returncode != 0


def config_get(workspace: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["pulumi", "config", "get", "token", "--stack", "staging"], cwd=workspace, env=env,
                          capture_output=True, text=True, check=False)


DEFERRED_PROGRAM = """name: deferred
runtime: yaml
config:
  greeting:
    type: string
outputs:
  greeting: ${greeting}
"""


async def test_plain_config_rides_on_the_next_operation(tmp_path: Path, start_agent: AgentFactory) -> None:
    """Plaintext config waits for the next operation, which sets it with `--config` (one CLI process fewer a
    workspace start); anything else is set at once, after what waited."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "Pulumi.yaml").write_text(DEFERRED_PROGRAM)
    agent = await start_agent(workspace)
    stub = agent.stub
    await select(agent)
    stack_file = workspace / "Pulumi.dev.yaml"

    await stub.SetAllConfig(agent_pb2.SetAllConfigRequest(config=[config_item("greeting", "one"),
                                                                  config_item("note", "a=b")]))
    assert "greeting" not in stack_file.read_text()  # no CLI process has set it
    up = await drive(stub.Up(agent_pb2.UpRequest()))
    assert up.error is None, up.error
    assert outputs(up.result) == {"greeting": ("one", False)}
    saved = stack_file.read_text()
    assert "deferred:greeting: one" in saved
    assert "deferred:note: a=b" in saved

    await stub.SetAllConfig(agent_pb2.SetAllConfigRequest(config=[config_item("greeting", "two")]))
    preview = await drive(stub.Preview(agent_pb2.PreviewRequest()))
    assert preview.error is None, preview.error
    assert "deferred:greeting: two" in stack_file.read_text()  # a preview saves what it carried, as `up` does
    up = await drive(stub.Up(agent_pb2.UpRequest()))
    assert up.error is None, up.error
    assert outputs(up.result) == {"greeting": ("two", False)}

    await stub.SetAllConfig(agent_pb2.SetAllConfigRequest(config=[config_item("greeting", "three")]))
    await stub.SetAllConfig(agent_pb2.SetAllConfigRequest(config=[config_item("token", "hush", secret=True)]))
    saved = stack_file.read_text()
    assert "deferred:greeting: three" in saved  # set before the secret, by a `config set-all` of its own
    assert "deferred:token:" in saved
    assert "secure:" in saved
    assert "hush" not in saved
