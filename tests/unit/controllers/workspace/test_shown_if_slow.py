"""An initialisation step's status (Installing, Initializing) is written only when the step runs long enough to be
read: never for a quick step, once and before the step ends for a slow one, and a step is never left running."""

from __future__ import annotations

import asyncio

import pytest

from pko.controllers.workspace import initialize


class Shown:
    def __init__(self, step_done: asyncio.Event | None = None) -> None:
        self.calls = 0
        self.step_done = step_done
        self.while_running: list[bool] = []

    async def __call__(self) -> None:
        self.calls += 1
        if self.step_done is not None:
            self.while_running.append(not self.step_done.is_set())


async def _step(seconds: float, done: asyncio.Event | None = None, result: str = "ok") -> str:
    await asyncio.sleep(seconds)
    if done is not None:
        done.set()
    return result


async def test_a_quick_step_is_not_shown() -> None:
    shown = Shown()
    assert await initialize.shown_if_slow(_step(0.0), shown, after=0.5) == "ok"
    assert shown.calls == 0


async def test_a_slow_step_is_shown_once_while_it_runs_and_its_result_returned() -> None:
    done = asyncio.Event()
    shown = Shown(done)
    assert await initialize.shown_if_slow(_step(0.2, done, "installed"), shown, after=0.02) == "installed"
    assert shown.calls == 1
    assert shown.while_running == [True]


async def test_a_failing_step_raises_to_the_caller_shown_or_not() -> None:
    async def fails(seconds: float) -> None:
        await asyncio.sleep(seconds)
        raise RuntimeError("install failed")

    quick, slow = Shown(), Shown()
    with pytest.raises(RuntimeError, match="install failed"):
        await initialize.shown_if_slow(fails(0.0), quick, after=0.5)
    with pytest.raises(RuntimeError, match="install failed"):
        await initialize.shown_if_slow(fails(0.1), slow, after=0.01)
    assert (quick.calls, slow.calls) == (0, 1)


async def test_cancelled_or_a_failed_write_cancels_the_step() -> None:
    started = asyncio.Event()
    cancelled: list[bool] = []

    async def long_step() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    waiting = asyncio.ensure_future(initialize.shown_if_slow(long_step(), Shown(), after=30))
    await started.wait()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.sleep(0)

    async def refused() -> None:
        raise ConnectionError("the API server is gone")

    started.clear()
    with pytest.raises(ConnectionError):
        await initialize.shown_if_slow(long_step(), refused, after=0.01)
    await asyncio.sleep(0)
    assert cancelled == [True, True]
