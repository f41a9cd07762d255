"""Interrupting an update never leaves the stack locked: a client cancelling the call, or SIGTERM to the agent,
makes the agent Ctrl-C the Pulumi CLI and let it wind down, and the next `up` succeeds."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from agent_testlib import (
    AGENT_COMMAND,
    Agent,
    AgentFactory,
    config_item,
    copy_program,
    drive,
    start_time,
    wait_gone,
)
from google.protobuf import json_format

from pko.protocol.proto import agent_pb2

pytestmark = pytest.mark.pulumi

STEPS = 4
DELAY = 3.0  # seconds per resource: long enough to interrupt the second one, short enough for the test


async def prepare(agent: Agent) -> None:
    await agent.stub.SelectStack(agent_pb2.SelectStackRequest(stack_name="dev", create=True))
    await agent.stub.SetAllConfig(agent_pb2.SetAllConfigRequest(config=[
        config_item("delay", str(DELAY)), config_item("count", str(STEPS))]))


def started_steps(events: list[dict[str, Any]]) -> int:
    pre = [e["resourcePreEvent"]["metadata"] for e in events if "resourcePreEvent" in e]
    return sum(1 for meta in pre if "::step-" in meta["urn"] and meta["op"] == "create")


async def _until_a_step_starts(agent: Agent) -> Any:
    """Start an `up` and read its events until the first step's creation has started; the call, still open."""
    call = agent.stub.Up(agent_pb2.UpRequest())
    events: list[dict[str, Any]] = []
    async for message in call:
        if message.HasField("event"):
            events.append(json_format.MessageToDict(message.event))
            if started_steps(events) >= 1:
                break
    return call


def _cancel_finished_before_exit(log: str) -> None:
    """The CLI said it finished its cancel ("canceled" or "cancelled", by code path) before the agent stopped."""
    finished = re.search(r"update cancell?ed", log)
    assert finished is not None, log[-3000:]
    assert finished.start() < log.index("server stopped")


async def created(agent: Agent) -> int:
    info = await agent.stub.Info(agent_pb2.InfoRequest())
    return info.summary.resource_count


async def test_client_cancel_stops_pulumi_and_the_next_up_succeeds(tmp_path: Path,
                                                                    start_agent: AgentFactory) -> None:
    agent = await start_agent(copy_program("slow-python", tmp_path / "ws"))
    await prepare(agent)

    call = agent.stub.Up(agent_pb2.UpRequest())
    events: list[dict[str, Any]] = []

    async def read() -> None:
        async for message in call:
            if message.HasField("event"):
                events.append(json_format.MessageToDict(message.event))
                if started_steps(events) >= 1:
                    call.cancel()
                    return

    await asyncio.wait_for(read(), 120)
    assert await call.code() == grpc.StatusCode.CANCELLED

    # The agent waits for the CLI to wind down; the update is then over and the lock released.
    for _ in range(1200):
        if "up interrupted: the Pulumi CLI has stopped" in agent.log():
            break
        await asyncio.sleep(0.1)
    assert "up interrupted: the Pulumi CLI has stopped" in agent.log(), agent.log()[-3000:]
    assert "update canceled" in agent.log()

    second = await drive(agent.stub.Up(agent_pb2.UpRequest()))
    assert second.error is None, f"{second.error}\n{agent.log()[-3000:]}"
    assert second.result.summary.result == "succeeded"
    assert started_steps(second.events) < STEPS  # the first update had created some steps already


async def test_sigterm_during_up_winds_down_and_a_new_agent_can_up(tmp_path: Path,
                                                                    start_agent: AgentFactory) -> None:
    workspace = copy_program("slow-python", tmp_path / "ws")
    agent = await start_agent(workspace)
    await prepare(agent)

    signalled = False

    def on_event(event: dict[str, Any]) -> None:
        nonlocal signalled
        if not signalled and "resourcePreEvent" in event and started_steps([event]):
            agent.process.send_signal(signal.SIGTERM)
            signalled = True

    first = await drive(agent.stub.Up(agent_pb2.UpRequest()), on_event)
    assert signalled
    assert first.result is None
    assert first.error is not None
    assert first.error.code() in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.UNAVAILABLE)
    assert await agent.wait_exit() == 0, agent.log()[-3000:]
    assert "shutting down the server (SIGTERM)" in agent.log()

    replacement = await start_agent(workspace)
    await replacement.stub.SelectStack(agent_pb2.SelectStackRequest(stack_name="dev"))
    second = await drive(replacement.stub.Up(agent_pb2.UpRequest()))
    assert second.error is None, f"{second.error}\n{replacement.log()[-3000:]}"
    assert second.result.summary.result == "succeeded"
    assert await created(replacement) == STEPS + 2  # the steps, the stack and the dynamic provider


async def test_a_second_signal_exits_at_once(tmp_path: Path, start_agent: AgentFactory) -> None:
    """A person's second Ctrl-C (SIGINT) after the SIGTERM: exit at once. (A second SIGTERM this soon would be
    taken for a dying parent's repeated death signal: the next test.)"""
    agent = await start_agent(copy_program("slow-python", tmp_path / "ws"))
    await prepare(agent)
    seconds: list[asyncio.Task[None]] = []

    async def second_signal() -> None:
        # Only once the first one was handled: two signals sent back to back may arrive as one.
        for _ in range(600):
            if "shutting down the server" in agent.log():
                break
            await asyncio.sleep(0.05)
        agent.process.send_signal(signal.SIGINT)

    def on_event(event: dict[str, Any]) -> None:
        if not seconds and started_steps([event]):
            agent.process.send_signal(signal.SIGTERM)
            seconds.append(asyncio.ensure_future(second_signal()))

    outcome = await drive(agent.stub.Up(agent_pb2.UpRequest()), on_event)
    assert seconds
    await asyncio.wait_for(seconds[0], 30)
    assert outcome.result is None
    assert await agent.wait_exit(DELAY) == 1, agent.log()[-3000:]  # well before the in-flight step could finish
    assert "second signal (SIGINT): exiting immediately" in agent.log()


async def test_a_sigterm_right_after_the_first_is_the_same_news(tmp_path: Path, start_agent: AgentFactory) -> None:
    """The dying operator's death signal comes once per exiting thread, and the first ones come while its other
    threads still run — before the agent is re-parented, so its parent looks alive. A SIGTERM within moments of
    the first is therefore the same news: the CLI still finishes its cancel and the agent exits cleanly."""
    agent = await start_agent(copy_program("slow-python", tmp_path / "ws"))
    await prepare(agent)
    call = await _until_a_step_starts(agent)
    agent.process.send_signal(signal.SIGTERM)
    await asyncio.to_thread(_logged, agent, "shutting down the server (SIGTERM)")
    agent.process.send_signal(signal.SIGTERM)
    call.cancel()
    assert await agent.wait_exit() == 0, agent.log()[-3000:]
    log = agent.log()
    assert "SIGTERM again from the parent's death" in log, log[-3000:]
    assert "exiting immediately" not in log, log[-3000:]
    _cancel_finished_before_exit(log)


async def test_an_operator_gone_mid_up_leaves_the_cli_to_wind_down_before_the_agent_exits(
        tmp_path: Path, start_agent: AgentFactory) -> None:
    """A SIGKILLed operator: its call drops and the agent gets SIGTERM (its lifeline) at once. The dropped call
    ends the server's wait straight away, but the agent must still wait for the interrupted CLI to finish its Ctrl-C
    (write its state, release the lock, stop its plugins) before it exits; it used to exit at once and take the CLI
    down mid-cancel, leaving the language host running."""
    agent = await start_agent(copy_program("slow-python", tmp_path / "ws"))
    await prepare(agent)
    call = await _until_a_step_starts(agent)
    call.cancel()
    agent.process.send_signal(signal.SIGTERM)
    assert await agent.wait_exit() == 0, agent.log()[-3000:]
    log = agent.log()
    assert "waiting for 1 Pulumi CLI command(s) to wind down" in log, log[-3000:]
    _cancel_finished_before_exit(log)


WRAPPER = """import os, subprocess, sys, time
pidfile, release, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
agent = subprocess.Popen(argv, env={**os.environ, "PKO_AGENT_PARENT_PID": str(os.getpid())})
open(pidfile, "w").write(str(agent.pid))
while not os.path.exists(release):
    time.sleep(0.05)
os._exit(0)
"""


def _logged(agent: Agent, line: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while line not in agent.log() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert line in agent.log(), agent.log()[-3000:]


async def test_the_dying_operators_repeated_death_signal_is_not_a_second_signal(
        tmp_path: Path, start_agent: AgentFactory) -> None:
    """The local runtime's operator is a threaded process: when it is SIGKILLed, its agent's death signal
    (PR_SET_PDEATHSIG: SIGTERM) comes once per exiting thread. A second SIGTERM after the parent died is that same
    news, not a second request ("exit at once"), which would kill the CLI mid-cancel."""
    wrapper, pidfile, release = tmp_path / "parent_of_agent.py", tmp_path / "agent.pid", tmp_path / "die"
    wrapper.write_text(WRAPPER)
    agent = await start_agent(copy_program("slow-python", tmp_path / "ws"),
                              command=[sys.executable, str(wrapper), str(pidfile), str(release), *AGENT_COMMAND])
    agent_pid = int(pidfile.read_text())
    agent_started = start_time(agent_pid)
    agent_fd = os.pidfd_open(agent_pid)  # signals through it reach that very process, never a later one on its pid
    await prepare(agent)
    call = await _until_a_step_starts(agent)
    release.touch()  # the "operator" dies: the agent's lifeline SIGTERM
    assert await agent.wait_exit(10) == 0
    await asyncio.to_thread(_logged, agent, "shutting down the server (SIGTERM)")
    try:
        signal.pidfd_send_signal(agent_fd, signal.SIGTERM)  # the same death, reported by another of its threads
    finally:
        os.close(agent_fd)
    call.cancel()
    assert await asyncio.to_thread(wait_gone, agent_pid, 120.0, agent_started), agent.log()[-3000:]
    log = agent.log()
    assert "SIGTERM again from the parent's death" in log, log[-3000:]
    assert "exiting immediately" not in log, log[-3000:]
    _cancel_finished_before_exit(log)
