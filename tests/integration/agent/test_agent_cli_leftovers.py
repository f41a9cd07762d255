"""No process a CLI command started outlives it: the agent runs each command in a process group of its own and,
once the command has exited (normally, cancelled, or killed after its grace), kills what is left in that group —
the way a plugin (a language host, a provider) of a CLI stopped at a bad moment would otherwise be left running,
reparented to init, after its agent is gone.

The command here is a shell script standing in for a CLI that exits before its child (the real CLI does this only
when it is killed or cancelled at the wrong moment, which cannot be timed in a test; the chaos tier does that).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import signal
import time
from pathlib import Path

import pytest
from agent_testlib import wait_gone

from pko.agent import pulumicmd
from pko.agent.pulumicmd import PulumiCLI


def _script(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "cli.sh"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


#: What the scripts write of their child: its pid and its start time (so a reused pid is not taken for it).
CHILD = "sleep 300 >/dev/null 2>&1 & p=$!; echo \"$p $(cut -d' ' -f22 /proc/$p/stat)\" > {pidfile}"


def _written(path: Path, timeout: float = 10.0) -> tuple[int, str]:
    deadline = time.monotonic() + timeout
    while not (path.exists() and len(path.read_text().split()) == 2) and time.monotonic() < deadline:
        time.sleep(0.02)
    pid, started = path.read_text().split()
    return int(pid), started


async def test_a_child_left_by_a_finished_command_is_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    script = _script(tmp_path, f"{CHILD.format(pidfile=pidfile)}\necho done")
    result = await PulumiCLI(tmp_path, dict(os.environ), binary=str(script)).run(["up"])
    assert result.stdout.strip() == "done"
    child, started = _written(pidfile)
    assert wait_gone(child, 5.0, started), f"the command's child {child} outlived it"


async def test_a_command_that_ignores_ctrl_c_is_killed_with_its_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    script = _script(tmp_path, f"trap '' INT\n{CHILD.format(pidfile=pidfile)}\nwait")
    cli = PulumiCLI(tmp_path, dict(os.environ), binary=str(script), interrupt_grace=0.5)
    task = asyncio.create_task(cli.run(["up"]))
    child, started = await asyncio.to_thread(_written, pidfile)
    task.cancel()  # Ctrl-C, ignored; after the grace: SIGKILL for the whole group
    with pytest.raises(asyncio.CancelledError):
        await task
    assert wait_gone(child, 5.0, started), f"the cancelled command's child {child} outlived it"


async def test_a_command_cancelled_while_it_starts_is_wound_down_with_its_children(tmp_path: Path) -> None:
    """A cancel that lands after the command was forked but before its pipes are connected (seen under load: a
    child outlived a cancelled command) gets the same Ctrl-C, grace and group kill as any other — asyncio alone
    would SIGKILL the command there and nothing it had started."""
    pidfile = tmp_path / "child.pid"
    script = _script(tmp_path, CHILD.format(pidfile=pidfile))  # starts its child, writes it down, exits
    cli = PulumiCLI(tmp_path, dict(os.environ), binary=str(script), interrupt_grace=30)
    # ignored signals are inherited: the command ignores Ctrl-C from its first instruction, so it runs to its end
    # when it is given its Ctrl-C and grace, and not when it is killed at once
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        task = asyncio.create_task(cli.run(["up"]))
        await asyncio.sleep(0)  # the task is now starting the command
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        signal.signal(signal.SIGINT, previous)
    assert pidfile.exists(), "the command was killed as it started, not given its Ctrl-C and grace"
    child, started = _written(pidfile)
    assert wait_gone(child, 5.0, started), f"the cancelled command's child {child} outlived it"
    assert cli.running == 0


async def test_the_agent_knows_the_pids_of_the_commands_it_started_and_when(tmp_path: Path) -> None:
    """A stale lock's holder is this agent's own when it started that pid before the lock was taken (a CLI killed
    under a living agent: pko.agent.stalelocks); a lock of the same pid from before that command — the pid used
    again, or a twin container's — is not."""
    before = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    result = await PulumiCLI(tmp_path, dict(os.environ), binary="sh").run(["-c", "echo $$"])
    pid = int(result.stdout.strip())
    now = datetime.datetime.now(datetime.UTC)
    assert pulumicmd.started_here(pid, now)
    assert not pulumicmd.started_here(pid, before)
    assert not pulumicmd.started_here(pid, None)
    assert not pulumicmd.started_here(os.getpid(), now)
