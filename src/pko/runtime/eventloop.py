"""The operator's event loop: uvloop's, unless told otherwise.

Why: the operator is one Python process on one core, and much of its CPU a Stack is the event loop's own machinery
around some 28 API requests, their watch events and the agents' gRPC calls (callbacks, timers, the TLS transport).
uvloop runs that machinery in C over libuv: a request to the API server costs the client a fifth less CPU on it
(``python -m bench.requestcost``, docs/performance.md), and the same code runs unchanged (asyncio's tasks, futures
and streams; aiohttp, gRPC's asyncio API and subprocesses all work on it).

``PKO_EVENT_LOOP=asyncio`` (or a platform without uvloop) runs the standard library's loop instead: the behaviour
is the same, only its cost differs. Any other value is refused, so a typo is not a silent fallback.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

ENV = "PKO_EVENT_LOOP"
UVLOOP = "uvloop"
ASYNCIO = "asyncio"

T = TypeVar("T")
LoopFactory = Callable[[], asyncio.AbstractEventLoop]


class EventLoopError(ValueError):
    """``PKO_EVENT_LOOP`` names a loop this process cannot run."""


def choose(env: Mapping[str, str], uvloop_installed: bool) -> str:
    """Which loop to run (pure): ``PKO_EVENT_LOOP`` if set, else uvloop when it is installed."""
    asked = env.get(ENV, "").strip().lower()
    if asked == ASYNCIO:
        return ASYNCIO
    if asked == UVLOOP:
        if not uvloop_installed:
            raise EventLoopError(f"{ENV}={UVLOOP}, but uvloop is not installed")
        return UVLOOP
    if asked:
        raise EventLoopError(f"{ENV} must be {UVLOOP!r} or {ASYNCIO!r}, not {asked!r}")
    return UVLOOP if uvloop_installed else ASYNCIO


def factory(name: str) -> LoopFactory | None:
    """The loop factory for `name` (None: asyncio's default)."""
    if name == UVLOOP:
        import uvloop

        return uvloop.new_event_loop
    return None


def chosen(env: Mapping[str, str] | None = None) -> str:
    """:func:`choose` for this process: its environment (or `env`) and whether uvloop is installed."""
    return choose(os.environ if env is None else env, importlib.util.find_spec(UVLOOP) is not None)


def name_of(loop: asyncio.AbstractEventLoop) -> str:
    """Which loop `loop` is, as :func:`choose` names it."""
    return UVLOOP if type(loop).__module__.split(".")[0] == UVLOOP else ASYNCIO


def run(main: Coroutine[Any, Any, T], env: Mapping[str, str] | None = None) -> T:
    """Run `main` to completion on the chosen loop, as :func:`asyncio.run` does."""
    try:
        name = chosen(env)
    except EventLoopError:
        main.close()  # never run: no "never awaited" warning on top of the error
        raise
    with asyncio.Runner(loop_factory=factory(name)) as runner:
        return runner.run(main)
