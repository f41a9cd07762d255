"""Tie an agent process's life to the operator that started it (the `local` workspace runtime).

When `$PKO_AGENT_PARENT_PID` names our parent, ask Linux to send SIGTERM when that parent dies (prctl
PR_SET_PDEATHSIG) — so a SIGKILLed operator leaves no agent behind — and exit at once if the parent is already
gone. It runs in the agent itself at start-up, never between fork and exec (unsafe in the threaded operator).

The signal alone has been seen to miss: an agent the chaos tier's operator SIGKILL started a moment before the kill
logged that it was listening and then lived on under init, never told (fresh-clone CI). A SIGTERM the agent's
parent ignored is still ignored after exec, so a death signal that comes before the agent's own handler is
installed is dropped; and a signal mask a parent passes down can hold it back for good. So :func:`hold` gives
SIGTERM its default action back (before the handler, the death signal simply ends an agent that runs nothing yet),
and the serving agent also :func:`watch`-es its parent: a pidfd that becomes readable when the operator exits (no
polling, no cost at rest), or a slow poll of the parent pid where pidfds are missing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # every agent command holds the lifeline; only `serve` runs an event loop
    import asyncio

PARENT_ENV = "PKO_AGENT_PARENT_PID"
PR_SET_PDEATHSIG = 1
POLL_SECONDS = 2.0  # where there is no pidfd: how often the parent pid is compared


def expected_parent(env: Mapping[str, str] = os.environ) -> int | None:
    """The operator pid the agent's life is tied to, or None when nothing asked for it (an agent in a pod)."""
    value = env.get(PARENT_ENV, "")
    return int(value) if value.isdigit() else None


def hold(env: Mapping[str, str] = os.environ) -> None:
    expected = expected_parent(env)
    if expected is None:
        return
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:  # inherited through exec: the death signal would be lost
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):
            return
    if os.getppid() != expected:  # the operator died before we could ask
        raise SystemExit(1)


def watch(loop: asyncio.AbstractEventLoop, gone: Callable[[int], None],
          env: Mapping[str, str] = os.environ) -> Callable[[], None]:
    """Call `gone(pid)` once, on `loop`, when the operator that started us has exited, whatever became of its death
    signal; returns the function that stops watching. Nothing is watched when no parent was named."""
    expected = expected_parent(env)
    if expected is None:
        return lambda: None

    def fire() -> None:  # each way below fires at most once
        gone(expected)

    pidfd = _open_pidfd(expected)
    if os.getppid() != expected:  # already gone (then its pid may name another process: the pidfd is not ours)
        if pidfd is not None:
            os.close(pidfd)
        loop.call_soon(fire)
        return lambda: None
    if pidfd is not None:
        def readable() -> None:
            loop.remove_reader(pidfd)
            fire()

        loop.add_reader(pidfd, readable)

        def stop_pidfd() -> None:
            loop.remove_reader(pidfd)
            with contextlib.suppress(OSError):
                os.close(pidfd)

        return stop_pidfd

    import asyncio

    async def poll() -> None:
        while os.getppid() == expected:  # noqa: ASYNC110 (no event tells of a parent's exit without a pidfd)
            await asyncio.sleep(POLL_SECONDS)
        fire()

    task = loop.create_task(poll())

    def stop_polling() -> None:
        task.cancel()

    return stop_polling


def _open_pidfd(pid: int) -> int | None:
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(pid)
    except OSError:
        return None
    return fd
