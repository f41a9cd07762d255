"""An `up` kept running past its caller (pko.agent.kept): followers come and go, the operation goes on to its
ending; only `cancel` stops it; a long one keeps its latest messages and always its last."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from pko.agent import kept


class Source:
    """An operation's messages, released one at a time by the test; records whether it was stopped."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[str | BaseException | None] = asyncio.Queue()
        self.stopped = False
        self.finished = False

    async def run(self) -> AsyncIterator[str]:
        try:
            while True:
                item = await self.queue.get()
                if item is None:
                    self.finished = True
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        except asyncio.CancelledError:
            self.stopped = True
            raise


async def collect(held: kept.Kept[str]) -> list[str]:
    return [message async for message in held.follow()]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_follower_sees_every_message_and_the_end() -> None:
    source = Source()
    held = kept.Kept("u1", source.run())
    follower = asyncio.create_task(collect(held))
    for item in ("a", "b", "result", None):
        await source.queue.put(item)
    assert await asyncio.wait_for(follower, 5) == ["a", "b", "result"]
    assert not held.running
    assert source.finished


async def test_a_follower_going_away_leaves_the_operation_running_and_a_later_one_gets_its_result() -> None:
    source = Source()
    held = kept.Kept("u1", source.run())
    first = asyncio.create_task(collect(held))
    await source.queue.put("a")
    await settle()
    first.cancel()  # the operator died mid-`up`
    with pytest.raises(asyncio.CancelledError):
        await first
    assert held.running
    assert not source.stopped
    await source.queue.put("b")
    await source.queue.put("result")
    await source.queue.put(None)
    await held.wait()
    # the restarted operator follows the same operation: what happened meanwhile, then the ending
    assert await asyncio.wait_for(collect(held), 5) == ["a", "b", "result"]
    assert source.finished
    assert not source.stopped


async def test_a_failure_is_the_ending_every_follower_raises() -> None:
    source = Source()
    held = kept.Kept("u1", source.run())
    await source.queue.put("a")
    await source.queue.put(RuntimeError("up failed: boom"))
    await held.wait()
    for _ in range(2):
        seen: list[str] = []

        async def read(into: list[str]) -> None:
            async for message in held.follow():
                into.append(message)

        with pytest.raises(RuntimeError, match="boom"):
            await read(seen)
        assert seen == ["a"]


async def test_cancel_stops_the_operation_and_waits_for_it() -> None:
    source = Source()
    held = kept.Kept("u1", source.run())
    follower = asyncio.create_task(collect(held))
    await source.queue.put("a")
    await settle()
    assert await held.cancel() is True
    assert source.stopped
    assert not held.running
    with pytest.raises(kept.Cancelled, match="u1"):
        await follower
    assert await held.cancel() is False  # over already: nothing to stop


async def test_a_long_operation_keeps_its_latest_messages_and_its_last() -> None:
    source = Source()
    held = kept.Kept("u1", source.run(), limit=3)
    for index in range(10):
        await source.queue.put(f"e{index}")
    await settle()
    late = asyncio.create_task(collect(held))  # attached while it runs: the latest three, then the rest
    await settle()
    await source.queue.put("summary")
    await source.queue.put("result")
    await source.queue.put(None)
    assert await asyncio.wait_for(late, 5) == ["e7", "e8", "e9", "summary", "result"]


async def test_once_over_only_the_last_few_messages_stay() -> None:
    source = Source()
    held = kept.Kept("u1", source.run())
    for index in range(50):
        await source.queue.put(f"e{index}")
    await source.queue.put("summary")
    await source.queue.put("result")
    await source.queue.put(None)
    await held.wait()
    everything = [*(f"e{i}" for i in range(50)), "summary", "result"]
    assert await collect(held) == everything[-kept.KEPT_AFTER_END:]
    assert (await collect(held))[-2:] == ["summary", "result"]


async def test_a_follower_attached_mid_run_gets_the_backlog_then_the_rest_in_order() -> None:
    source = Source()
    held = kept.Kept("u1", source.run())
    await source.queue.put("a")
    await source.queue.put("b")
    await settle()
    follower = asyncio.create_task(collect(held))
    await settle()
    await source.queue.put("c")
    await source.queue.put("result")
    await source.queue.put(None)
    assert await asyncio.wait_for(follower, 5) == ["a", "b", "c", "result"]


async def test_an_operation_nobody_follows_for_long_is_cancelled() -> None:
    """An operator that gave up on it (its Update aborted) never follows it again: it must not hold the workspace
    for ever."""
    source = Source()
    held = kept.Kept("u1", source.run(), abandon_after=0.2)
    first = asyncio.create_task(collect(held))
    await source.queue.put("a")
    await settle()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(held.wait(), 5)
    assert source.stopped
    with pytest.raises(kept.Cancelled, match="nobody followed it"):
        await collect(held)


async def test_a_follower_that_comes_back_in_time_keeps_it_running() -> None:
    source = Source()
    held = kept.Kept("u1", source.run(), abandon_after=0.3)
    first = asyncio.create_task(collect(held))
    await settle()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.sleep(0.1)
    second = asyncio.create_task(collect(held))  # the restarted operator, in time
    await asyncio.sleep(0.5)  # past the first deadline
    assert held.running
    assert not source.stopped
    await source.queue.put("result")
    await source.queue.put(None)
    assert await asyncio.wait_for(second, 5) == ["result"]
