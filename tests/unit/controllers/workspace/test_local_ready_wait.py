"""How the local runtime waits for a starting agent on its ready pipe (LocalRuntime._wait_ready): the fetch's time
is taken when the agent says its fetch is over, the start ends when it says it listens, and an agent that exits
ends the wait with its fetch's error or its last log line — even while the pipe's write end is still open
somewhere, and though a fetch has no deadline."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pko.controllers.workspace import forks, local
from pko.protocol import ready


@pytest.fixture
def pipe() -> Iterator[tuple[ready.Lines, int]]:
    said, say = os.pipe()
    lines = ready.Lines(said)
    yield lines, say
    lines.close()
    os.close(say)


def _agent(tmp_path: Path, process: forks.ForkedAgent) -> local.Agent:
    return local.Agent("rev", tmp_path, 1, process)


async def test_the_fetch_is_timed_when_it_is_over_and_the_start_ends_when_it_listens(
        tmp_path: Path, pipe: tuple[ready.Lines, int]) -> None:
    lines, say = pipe
    agent = _agent(tmp_path, forks.ForkedAgent(0))
    (tmp_path / local.FETCH_REPORT).write_text(json.dumps({"seconds": 1.25}))
    os.write(say, ready.FETCHED + ready.LISTENING)
    runtime = local.LocalRuntime(None, tmp_path)  # type: ignore[arg-type]  # the wait reads no API
    await asyncio.wait_for(runtime._wait_ready(agent, lines, fetching=True), 5)
    assert agent.fetch_seconds == 1.25


async def test_an_agent_that_exits_while_fetching_ends_the_wait_though_the_pipe_stays_open(
        tmp_path: Path, pipe: tuple[ready.Lines, int]) -> None:
    lines, _ = pipe  # the write end stays open here: only the agent's exit can end the wait
    process = forks.ForkedAgent(0)
    agent = _agent(tmp_path, process)
    (tmp_path / local.FETCH_REPORT).write_text(json.dumps({"error": "unable to fetch git source: not found"}))
    runtime = local.LocalRuntime(None, tmp_path)  # type: ignore[arg-type]
    waiting = asyncio.ensure_future(runtime._wait_ready(agent, lines, fetching=True))
    await asyncio.sleep(0.05)
    assert not waiting.done()  # a fetch has no deadline
    process.exited(1)
    with pytest.raises(local.StartFailed, match=r"fetching the source failed \(exit 1\): unable to fetch git"):
        await asyncio.wait_for(waiting, 5)


async def test_an_agent_whose_end_closes_before_it_listens_ends_the_wait_with_its_last_log_line(
        tmp_path: Path) -> None:
    said, say = os.pipe()
    lines = ready.Lines(said)
    process = forks.ForkedAgent(0)
    agent = _agent(tmp_path, process)
    (tmp_path / "agent.log").write_text("starting\nunable to open the workspace: no Pulumi.yaml\n")
    runtime = local.LocalRuntime(None, tmp_path)  # type: ignore[arg-type]
    waiting = asyncio.ensure_future(runtime._wait_ready(agent, lines, fetching=False))
    os.write(say, ready.FETCHED[:3])  # half a line, then the end of the stream: nothing said
    os.close(say)
    await asyncio.sleep(0.05)
    assert not waiting.done()  # the stream ended: its exit is waited for, to say why
    process.exited(1)
    try:
        with pytest.raises(local.StartFailed, match="the agent exited with 1: unable to open the workspace"):
            await asyncio.wait_for(waiting, 5)
    finally:
        lines.close()
