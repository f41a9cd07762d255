"""The processes the Pulumi CLI leaves behind: adopt them while the agent runs, and stop them when it stops.

Why: the CLI starts its language host and provider plugins, each in a process group of its own. A CLI cancelled in
the middle of an `up` (the operator went away, an idle timeout) sometimes exits without stopping its language
host, which then runs on under init, outliving its workspace (found by the chaos tier's SIGKILL rounds: a
`pulumi-language-yaml` left under init after every agent had wound down its CLI cleanly). Killing the CLI's
process group does not reach it. So the agent makes itself a *child subreaper* (Linux's PR_SET_CHILD_SUBREAPER):
what the CLI orphans is re-parented to the agent instead of init, and on the way out, once no CLI runs any more,
the agent kills and reaps every child it still has — grandchildren too, as each round re-parents them.

Must never: reap a child while a CLI command runs (asyncio waits for its own children by pid, and a stolen exit
status would read as a crash), block the shutdown for longer than its deadline, or sweep in a process that did not
adopt (:func:`adopt`): there the children are the caller's own (a test's control plane, a tool's servers), not what
a CLI orphaned.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
from pathlib import Path

log = logging.getLogger("pko.agent.orphans")

PR_SET_CHILD_SUBREAPER = 36
_adopted = False  # this process is the agent and a subreaper: its stray children are what a CLI orphaned


def adopt() -> bool:
    """Have the processes our descendants orphan re-parented to this one (Linux only); False where it cannot."""
    global _adopted
    if not sys.platform.startswith("linux"):
        return False
    try:
        _adopted = int(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False
    return _adopted


def children(pid: int | None = None) -> list[int]:
    """The direct children of `pid` (this process by default), from /proc."""
    pid = os.getpid() if pid is None else pid
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                found.extend(int(c) for c in (task / "children").read_text().split())
    return sorted(set(found))


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def _reap(pid: int) -> bool:
    """Collect `pid`'s exit status if it has one; True when it is gone."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == pid


def _comm(pid: int) -> str | None:
    """The process's name (`comm`, from /proc/<pid>/stat); None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.index("(") + 1:text.rindex(")")]


def sweep(keep: set[int], cli_name: str) -> int:
    """Between commands: kill and reap the children that are neither a running CLI command (`keep`) nor a CLI
    being started (named `cli_name`, not yet in `keep`) — what a finished CLI orphaned. Returns how many; none in a
    process that did not :func:`adopt`."""
    if not _adopted:
        return 0
    swept = 0
    for pid in children():
        if pid in keep:
            continue
        name = _comm(pid)
        if name is None or name == cli_name[:15]:
            continue
        _kill(pid)
        swept += 1
        for _ in range(100):  # SIGKILL lands at once; reap without blocking the loop for long
            if _reap(pid):
                break
            time.sleep(0.001)
    if swept:
        log.warning("stopped %d process(es) a finished Pulumi CLI command left behind", swept)
    return swept


def kill_now() -> None:
    """SIGKILL every child at once, without waiting: for an agent that exits immediately (a second signal)."""
    for pid in children():
        _kill(pid)


async def stop_all(deadline: float = 5.0) -> int:
    """Kill every child this process still has, and reap them, until none is left or `deadline` seconds pass.
    Only for the end of the agent's life, after its CLI commands have wound down. Returns how many it stopped."""
    stopped: set[int] = set()
    ends = time.monotonic() + deadline
    while time.monotonic() < ends:
        left = children()
        if not left:
            break
        for pid in left:
            if pid not in stopped:
                _kill(pid)
                stopped.add(pid)
        for pid in left:
            _reap(pid)
        await asyncio.sleep(0.05)
    if stopped:
        log.warning("stopped %d process(es) the Pulumi CLI left behind", len(stopped))
    return len(stopped)
