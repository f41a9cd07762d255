"""The work queue: dedupe, one worker per key, deferred re-adds, delayed and rate-limited adds."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pko.runtime import workqueue

LIVENESS = 10.0  # an upper bound so a broken queue fails instead of hanging; never a performance threshold


async def get(queue: workqueue.WorkQueue[str]) -> str:
    return await asyncio.wait_for(queue.get(), LIVENESS)


async def test_adds_are_deduplicated_and_fifo() -> None:
    queue: workqueue.WorkQueue[str] = workqueue.WorkQueue()
    for key in ["a", "b", "a", "c", "b"]:
        queue.add(key)
    assert len(queue) == 3
    assert [await get(queue) for _ in range(3)] == ["a", "b", "c"]


async def test_key_being_processed_is_not_handed_out_again_until_done() -> None:
    queue: workqueue.WorkQueue[str] = workqueue.WorkQueue()
    queue.add("a")
    assert await get(queue) == "a"
    queue.add("a")
    queue.add("a")
    assert len(queue) == 0
    assert queue.is_processing("a")
    queue.done("a")
    assert len(queue) == 1
    assert await get(queue) == "a"
    queue.done("a")
    assert len(queue) == 0


async def test_waiting_worker_is_woken_by_add() -> None:
    queue: workqueue.WorkQueue[str] = workqueue.WorkQueue()
    waiter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    assert not waiter.done()
    queue.add("x")
    assert await asyncio.wait_for(waiter, LIVENESS) == "x"


async def test_a_key_wakes_one_idle_worker_not_all_of_them() -> None:
    """A controller's 25 workers wait on one queue: each key must cost one worker's wake-up, not 25 (each woken
    worker that finds nothing waits again, on a new future: the futures made while a key is handed out count the
    workers woken for nothing)."""
    queue: workqueue.WorkQueue[str] = workqueue.WorkQueue()
    workers = [asyncio.create_task(queue.get()) for _ in range(10)]
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    made = 0
    create_future = loop.create_future

    def counting() -> asyncio.Future[object]:
        nonlocal made
        made += 1
        return create_future()

    loop.create_future = counting  # type: ignore[method-assign]
    try:
        queue.add("x")
        for _ in range(5):
            await asyncio.sleep(0)
    finally:
        del loop.create_future
    assert [w.result() for w in workers if w.done()] == ["x"]
    assert made == 0
    queue.shutdown()
    for worker in workers:
        if not worker.done():
            with pytest.raises(workqueue.ShutDown):
                await asyncio.wait_for(worker, LIVENESS)


async def test_a_worker_cancelled_once_woken_passes_its_key_on() -> None:
    queue: workqueue.WorkQueue[str] = workqueue.WorkQueue()
    first, second = asyncio.create_task(queue.get()), asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.add("x")  # wakes the first ...
    first.cancel()  # ... which is cancelled before it runs
    assert await asyncio.wait_for(second, LIVENESS) == "x"
    assert first.cancelled()


async def test_add_after_adds_later_and_earliest_deadline_wins() -> None:
    queue: workqueue.WorkQueue[str] = workqueue.WorkQueue()
    queue.add_after("a", 3600)
    first = queue.pending_after("a")
    queue.add_after("a", 7200)
    assert queue.pending_after("a") == first
    queue.add_after("a", 0.01)
    assert queue.pending_after("a") is not None
    assert queue.pending_after("a") < first  # type: ignore[operator]
    assert len(queue) == 0
    assert await get(queue) == "a"
    assert queue.pending_after("a") is None


async def test_a_delayed_add_can_be_dropped_and_a_queued_key_stays() -> None:
    queue: workqueue.WorkQueue[str] = workqueue.WorkQueue()
    queue.add_after("a", 0.02)
    queue.drop_after("a")
    assert queue.pending_after("a") is None
    await asyncio.sleep(0.05)
    assert len(queue) == 0  # it never came
    queue.add("b")
    queue.drop_after("b")  # nothing delayed: the queued key is left alone
    queue.drop_after("c")  # nothing at all
    assert await get(queue) == "b"
    queue.add_after("a", 0.01)  # a new delay after a drop works as ever
    assert await get(queue) == "a"


async def test_rate_limited_add_counts_retries_until_forgotten() -> None:
    queue: workqueue.WorkQueue[str] = workqueue.WorkQueue()
    queue.add_rate_limited("a")
    queue.add_rate_limited("a")
    assert queue.retries("a") == 2
    assert await get(queue) == "a"
    queue.forget("a")
    assert queue.retries("a") == 0


async def test_shutdown_wakes_waiters_and_drops_work() -> None:
    queue: workqueue.WorkQueue[str] = workqueue.WorkQueue()
    waiter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.add_after("later", 3600)
    queue.shutdown()
    with pytest.raises(workqueue.ShutDown):
        await asyncio.wait_for(waiter, LIVENESS)
    queue.add("a")
    assert len(queue) == 0
    assert queue.pending_after("later") is None


async def test_concurrent_workers_never_share_a_key() -> None:
    queue: workqueue.WorkQueue[str] = workqueue.WorkQueue()
    active: set[str] = set()
    overlaps: list[str] = []
    processed: list[str] = []
    enough = asyncio.Event()

    async def worker() -> None:
        while True:
            try:
                key = await queue.get()
            except workqueue.ShutDown:
                return
            if key in active:
                overlaps.append(key)
            active.add(key)
            await asyncio.sleep(0)
            if len(processed) < 60:
                queue.add(key)  # a change arriving while the key is processed
            processed.append(key)
            if len(processed) >= 60:
                enough.set()
            active.discard(key)
            queue.done(key)

    workers = [asyncio.create_task(worker()) for _ in range(4)]
    for key in "abc":
        queue.add(key)
    await asyncio.wait_for(enough.wait(), LIVENESS)
    queue.shutdown()
    await asyncio.wait_for(asyncio.gather(*workers), LIVENESS)
    assert overlaps == []
    assert set(processed) == {"a", "b", "c"}


async def test_unfinished_work_sums_keys_in_progress() -> None:
    queue: workqueue.WorkQueue[str] = workqueue.WorkQueue()
    assert queue.unfinished_work() == (0.0, 0.0)
    queue.add("a")
    queue.add("b")
    await get(queue)
    await get(queue)
    total, longest = queue.unfinished_work(now=time.monotonic() + 10)
    assert longest >= 10
    assert total >= 20
    assert total >= longest
    queue.done("a")
    queue.done("b")
    assert queue.unfinished_work() == (0.0, 0.0)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from("abcd")),
        st.tuples(st.just("get"), st.just("")),
        st.tuples(st.just("done"), st.integers(0, 3)),
    ),
    max_size=60,
)


@settings(deadline=None)
@given(operations)
def test_property_queue_invariants(ops: list[tuple[str, object]]) -> None:
    """After any sequence of adds, gets and dones: no key is handed out twice at once, waiting keys are
    unique, and every key added since it was last handed out is handed out again eventually."""

    async def scenario() -> None:
        queue: workqueue.WorkQueue[str] = workqueue.WorkQueue()
        processing: list[str] = []
        owed: set[str] = set()  # added since last handed out
        for op, arg in ops:
            if op == "add":
                queue.add(str(arg))
                owed.add(str(arg))
            elif op == "get" and len(queue):
                key = await queue.get()
                assert key not in processing
                processing.append(key)
                owed.discard(key)
            elif op == "done" and processing:
                queue.done(processing.pop(int(str(arg)) % len(processing)))
            waiting = list(queue._queue)
            assert len(waiting) == len(set(waiting))
            assert not set(waiting) & set(processing)
        for key in processing:
            queue.done(key)
        handed: set[str] = set()
        while len(queue):
            key = await queue.get()
            handed.add(key)
            queue.done(key)
        assert owed <= handed

    asyncio.run(scenario())
