"""An `up` the operator asked the agent to keep running (`UpRequest.operation_id`, pko.agent.kept), on the real
Pulumi CLI: its caller going away — an operator killed, restarted or upgraded — leaves the CLI running; a resume
naming the same operation follows it to its one result; nothing else runs in the workspace meanwhile; and only
`OperationControl.Cancel` stops it, with the CLI wound down and the stack unlocked."""

from __future__ import annotations

import asyncio
import datetime
import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from agent_testlib import Agent, AgentFactory, config_item, copy_program, drive
from google.protobuf import json_format

from pko.protocol import client
from pko.protocol.proto import agent_pb2

pytestmark = pytest.mark.pulumi

STEPS = 4
DELAY = 2.0  # seconds per resource: the `up` is still running when its caller goes away


def _ups(state: Path) -> list[dict[str, Any]]:
    entries = [json.loads(p.read_text()) for p in (state / ".pulumi" / "history").rglob("*.history.json")]
    return [e for e in entries if e.get("kind") == "update"]


def _steps(events: list[dict[str, Any]]) -> int:
    return sum(1 for e in events if "resourcePreEvent" in e and "::step-" in e["resourcePreEvent"]["metadata"]["urn"])


def _kept_up(operation_id: str, resume_after: datetime.datetime | None = None) -> agent_pb2.UpRequest:
    request = agent_pb2.UpRequest(operation_id=operation_id)
    if resume_after is not None:
        request.resume_after.FromDatetime(resume_after)
    return request


async def _until_a_step_starts(call: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async for message in call:
        if message.HasField("event"):
            events.append(json_format.MessageToDict(message.event))
            if _steps(events) >= 1:
                return events
    raise AssertionError("the up ended before its first step")


async def _prepared(start_agent: AgentFactory, tmp_path: Path, count: int = STEPS,
                    env: dict[str, str] | None = None) -> Agent:
    agent = await start_agent(copy_program("slow-python", tmp_path / "ws"), env=env)
    select = agent.stub.SelectStack(agent_pb2.SelectStackRequest(stack_name="dev", create=True))
    await select
    capabilities = dict(await select.initial_metadata())["pko-agent-capabilities"].split(",")
    assert "keep-running" in capabilities
    await agent.stub.SetAllConfig(agent_pb2.SetAllConfigRequest(config=[
        config_item("delay", str(DELAY)), config_item("count", str(count))]))
    return agent


async def test_a_kept_up_outlives_its_caller_and_a_resume_follows_it_to_its_one_result(
    tmp_path: Path, start_agent: AgentFactory, pulumi_env: dict[str, str],
) -> None:
    state = Path(pulumi_env["PULUMI_BACKEND_URL"].removeprefix("file://"))
    agent = await _prepared(start_agent, tmp_path)
    started = datetime.datetime.now(datetime.UTC).replace(microsecond=0)

    call = agent.stub.Up(_kept_up("uid-1"))
    before = await asyncio.wait_for(_until_a_step_starts(call), 120)
    call.cancel()  # the operator is gone
    assert await call.code() == grpc.StatusCode.CANCELLED
    await asyncio.sleep(DELAY / 2)
    assert "up interrupted" not in agent.log(), agent.log()[-3000:]

    # nothing else may run while it does: its CLI holds the stack
    busy = await drive(agent.stub.Up(agent_pb2.UpRequest()))
    assert busy.error is not None
    assert busy.error.code() == grpc.StatusCode.FAILED_PRECONDITION, busy.error
    assert "uid-1" in (busy.error.details() or "")
    assert "still running" in (busy.error.details() or "")
    refresh = await drive(agent.stub.Refresh(agent_pb2.RefreshRequest()))
    assert refresh.error is not None
    assert refresh.error.code() == grpc.StatusCode.FAILED_PRECONDITION

    # the restarted operator resumes its Update: it follows the same `up`, from its first event to its result
    resumed = await asyncio.wait_for(drive(agent.stub.Up(_kept_up("uid-1", started))), 120)
    assert resumed.error is None, f"{resumed.error}\n{agent.log()[-3000:]}"
    assert resumed.result.summary.result == "succeeded"
    assert resumed.result.outputs["steps"].value == b"4"
    assert resumed.events[:len(before)] == before, "the events kept from the start"
    assert _steps(resumed.events) == STEPS
    assert [e.get("result") for e in _ups(state)] == ["succeeded"], "one up, never interrupted"
    assert "update canceled" not in agent.log()
    assert "update cancelled" not in agent.log()

    # the result stays with the operation: a second resume (the operator died again before recording it) gets it
    again = await drive(agent.stub.Up(_kept_up("uid-1", started)))
    assert again.error is None
    assert again.result.summary.start_time == resumed.result.summary.start_time
    assert len(_ups(state)) == 1

    # another Update's resume is not this operation: the backend's record decides (it began before: nothing)
    other = await drive(agent.stub.Up(_kept_up("uid-2", datetime.datetime.now(datetime.UTC)
                                                + datetime.timedelta(seconds=2))))
    assert other.error is not None
    assert other.error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert len(_ups(state)) == 1


async def test_cancel_stops_a_kept_up_and_leaves_the_stack_unlocked(
    tmp_path: Path, start_agent: AgentFactory, pulumi_env: dict[str, str],
) -> None:
    state = Path(pulumi_env["PULUMI_BACKEND_URL"].removeprefix("file://"))
    agent = await _prepared(start_agent, tmp_path, count=6)
    control = client.control_stub(agent.channel)
    missing = control.Cancel(agent_pb2.CancelRequest(operation_id="nobody"))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await missing
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND

    call = agent.stub.Up(_kept_up("uid-3"))
    await asyncio.wait_for(_until_a_step_starts(call), 120)
    stopped = await asyncio.wait_for(control.Cancel(agent_pb2.CancelRequest(operation_id="uid-3")), 120)
    assert stopped.running
    # the follower hears why; the CLI has wound down by the time Cancel answered
    async def drain() -> None:
        async for _ in call:
            pass

    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await drain()
    assert ended.value.code() == grpc.StatusCode.CANCELLED
    assert "up interrupted: the Pulumi CLI has stopped" in agent.log(), agent.log()[-3000:]
    assert not list((state / ".pulumi" / "locks").rglob("*.json")), "the stack is left locked"
    assert (await control.Cancel(agent_pb2.CancelRequest(operation_id="uid-3"))).running is False

    after = await drive(agent.stub.Up(agent_pb2.UpRequest()))
    assert after.error is None, f"{after.error}\n{agent.log()[-3000:]}"
    assert after.result.summary.result == "succeeded"
    assert [e.get("result") for e in sorted(_ups(state), key=lambda e: int(e["startTime"]))] == [
        "failed", "succeeded"]


async def test_a_kept_up_nobody_follows_is_cancelled_and_leaves_the_stack_unlocked(
    tmp_path: Path, start_agent: AgentFactory, pulumi_env: dict[str, str],
) -> None:
    """The operator gave up on it (its Update aborted): after PKO_KEPT_UNFOLLOWED_SECONDS without a follower the
    agent interrupts it, so an `up` nobody waits for — a hung one would never end — does not hold the workspace."""
    state = Path(pulumi_env["PULUMI_BACKEND_URL"].removeprefix("file://"))
    agent = await _prepared(start_agent, tmp_path, count=8, env={"PKO_KEPT_UNFOLLOWED_SECONDS": "2"})
    call = agent.stub.Up(_kept_up("uid-4"))
    await asyncio.wait_for(_until_a_step_starts(call), 120)
    call.cancel()
    for _ in range(600):
        if "up interrupted: the Pulumi CLI has stopped" in agent.log():
            break
        await asyncio.sleep(0.1)
    log = agent.log()
    assert "nobody followed the kept operation uid-4 for 2s: cancelling it" in log, log[-3000:]
    assert "up interrupted: the Pulumi CLI has stopped" in log, log[-3000:]
    assert [e.get("result") for e in _ups(state)] == ["failed"]
    assert not list((state / ".pulumi" / "locks").rglob("*.json")), "the stack is left locked"
    after = await drive(agent.stub.Up(agent_pb2.UpRequest()))  # the workspace is free again
    assert after.error is None, f"{after.error}\n{agent.log()[-3000:]}"
