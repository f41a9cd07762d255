"""What a dead agent of the `local` runtime left running (its CLI's language host waiting for a gone engine) is
found by the agent's `$PKO_AGENT_INSTANCE` and killed; other agents' processes are not touched; an idle agent, with
no child to leave behind, is stopped without that search."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pko.controllers.workspace import local

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_only_the_dead_agents_processes_are_killed() -> None:
    mine = subprocess.Popen(SLEEP, env={**os.environ, local.INSTANCE_ENV: "dead-agent"})
    other = subprocess.Popen(SLEEP, env={**os.environ, local.INSTANCE_ENV: "live-agent"})
    try:
        assert local.kill_leftovers("dead-agent") == [mine.pid]
        assert mine.wait(10) == -9
        assert other.poll() is None
        assert local.kill_leftovers("") == []
    finally:
        for process in (mine, other):
            process.kill()
            process.wait()


def test_whether_a_process_has_children() -> None:
    alone = subprocess.Popen(SLEEP)
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time\n"
                               "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                               "print(child.pid, flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert local.has_children(parent.pid)
        assert not local.has_children(alone.pid)
        assert local.has_children(2**22 + 12345)  # no such process: what it left cannot be told
    finally:
        os.kill(child, 9)
        for process in (alone, parent):
            process.kill()
            process.wait()


async def _stopped(runs_a_cli: bool, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Stop a stand-in agent the way the runtime does, and say for which instances /proc was searched."""
    looked: list[str] = []
    monkeypatch.setattr(local, "kill_leftovers", lambda instance: looked.append(instance) or [])
    code = ("import subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n" if runs_a_cli else "") + \
        "import time\ntime.sleep(60)"
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", code, start_new_session=True)
    agent = local.Agent(revision="r", directory=Path("/nonexistent"), port=1, process=process, instance="i-1")
    await asyncio.sleep(0.5)  # the stand-in has started its child, if any
    await local.LocalRuntime._terminate(None, agent)  # type: ignore[arg-type]  # uses nothing of the runtime
    assert process.returncode is not None
    return looked


async def test_an_idle_agent_is_stopped_without_a_search_for_leftovers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert await _stopped(False, monkeypatch) == []


async def test_a_busy_agent_is_searched_for_leftovers_once_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    assert await _stopped(True, monkeypatch) == ["i-1"]
