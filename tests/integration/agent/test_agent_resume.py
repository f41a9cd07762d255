"""Resuming an `up` whose result the operator lost (pko.agent.resume), on the real Pulumi CLI: when the stack's
latest update began after the time the operator names and is over, the agent returns that update's outputs and
summary and runs nothing; when it began earlier, it runs nothing either and answers FAILED_PRECONDITION."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import grpc
import pytest
from agent_testlib import AgentFactory, drive
from google.protobuf import struct_pb2

from pko.protocol.proto import agent_pb2

pytestmark = pytest.mark.pulumi

PROJECT = ("name: resumed\nruntime: yaml\nconfig:\n  round:\n    type: string\n"
           "outputs:\n  round: ${round}\n  sealed:\n    fn::secret: s-${round}\n")


def _history(state: Path) -> list[dict[str, object]]:
    entries = [json.loads(p.read_text()) for p in (state / ".pulumi" / "history").rglob("*.history.json")]
    return sorted(entries, key=lambda e: str(e.get("startTime")))


def _config(round_: str) -> agent_pb2.SetAllConfigRequest:
    return agent_pb2.SetAllConfigRequest(config=[
        agent_pb2.ConfigItem(key="round", value=struct_pb2.Value(string_value=round_))])


def _up(after: datetime.datetime) -> agent_pb2.UpRequest:
    request = agent_pb2.UpRequest()
    request.resume_after.FromDatetime(after)
    return request


async def test_a_finished_up_is_resumed_and_an_older_one_is_not(
    tmp_path: Path, start_agent: AgentFactory, pulumi_env: dict[str, str],
) -> None:
    state = Path(pulumi_env["PULUMI_BACKEND_URL"].removeprefix("file://"))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "Pulumi.yaml").write_text(PROJECT)
    agent = await start_agent(workspace)
    stub = agent.stub
    await stub.SelectStack(agent_pb2.SelectStackRequest(stack_name="dev", create=True))
    await stub.SetAllConfig(_config("1"))

    # the lost Update was started a second before its `up` began (an `up` begun in the Update's own second is not
    # resumed: the history cannot tell it from its predecessor)
    started = datetime.datetime.now(datetime.UTC).replace(microsecond=0) - datetime.timedelta(seconds=1)
    first = await drive(stub.Up(agent_pb2.UpRequest()))
    assert first.error is None, first.error
    assert len(_history(state)) == 1

    resumed = await drive(stub.Up(_up(started)))  # the operator lost `first`'s result
    assert resumed.error is None, resumed.error
    assert resumed.events == [], "nothing ran"
    assert len(_history(state)) == 1, "no second up"
    assert resumed.result.summary.result == "succeeded"
    assert resumed.result.summary.start_time == first.result.summary.start_time
    assert dict(resumed.result.outputs) == dict(first.result.outputs)
    assert resumed.result.outputs["sealed"].secret
    assert b"s-1" in resumed.result.outputs["sealed"].value
    assert resumed.result.project_info.name == "resumed"

    # the latest update began before the Update the operator lost: nothing to resume, and nothing runs (the
    # operator then marks the Update Aborted, as the reference does)
    await stub.SetAllConfig(_config("2"))
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=2)
    refused = await drive(stub.Up(_up(later)))
    assert refused.error is not None
    assert refused.error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "nothing to resume" in (refused.error.details() or "")
    assert refused.events == []
    assert len(_history(state)) == 1

    ran = await drive(stub.Up(agent_pb2.UpRequest()))  # a plain up still runs, with the new config
    assert ran.error is None, ran.error
    assert len(_history(state)) == 2
    assert b"s-2" in ran.result.outputs["sealed"].value
