"""What happens to a key after reconcile: forget, requeue after a delay, or rate-limited retry; and its metric."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from prometheus_client import CollectorRegistry

from pko.kube import ObjectKey
from pko.runtime import controller, metrics, workqueue

KEY = ObjectKey("n", "a")


@pytest.mark.parametrize(
    ("result", "error", "label"),
    [
        (None, None, "success"),
        (controller.Result(), None, "success"),
        (controller.Result(requeue_after=5), None, "requeue_after"),
        (controller.Result(requeue=True), None, "requeue"),
        (None, RuntimeError("x"), "error"),
    ],
)
def test_outcome_labels(result: controller.Result | None, error: Exception | None, label: str) -> None:
    assert controller.outcome(result, error) == label


def make(reconcile: controller.Reconciler) -> tuple[controller.Controller, workqueue.WorkQueue[ObjectKey],
                                                    CollectorRegistry]:
    registry = CollectorRegistry()
    observed = metrics.Metrics(registry).controller("test")
    ctl = controller.Controller("test-controller", reconcile, metrics=observed)
    return ctl, workqueue.WorkQueue(metrics=observed), registry


async def test_error_is_retried_with_backoff_and_counted() -> None:
    async def fail(key: ObjectKey) -> controller.Result:
        raise RuntimeError("boom")

    ctl, queue, registry = make(fail)
    await ctl.process(queue, KEY)
    await ctl.process(queue, KEY)
    assert queue.retries(KEY) == 2
    assert queue.pending_after(KEY) is not None
    assert registry.get_sample_value("controller_runtime_reconcile_errors_total", {"controller": "test"}) == 2
    assert registry.get_sample_value("controller_runtime_reconcile_total",
                                     {"controller": "test", "result": "error"}) == 2
    assert registry.get_sample_value("workqueue_retries_total", {"controller": "test", "name": "test"}) == 2


async def test_requeue_after_resets_backoff_and_schedules() -> None:
    calls = 0

    async def flaky(key: ObjectKey) -> controller.Result:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("first time")
        return controller.Result(requeue_after=3600)

    ctl, queue, registry = make(flaky)
    await ctl.process(queue, KEY)
    assert queue.retries(KEY) == 1
    await ctl.process(queue, KEY)
    assert queue.retries(KEY) == 0
    assert queue.pending_after(KEY) is not None
    assert registry.get_sample_value("controller_runtime_reconcile_total",
                                     {"controller": "test", "result": "requeue_after"}) == 1


async def test_success_forgets_and_does_not_requeue() -> None:
    async def ok(key: ObjectKey) -> None:
        return None

    ctl, queue, registry = make(ok)
    await ctl.process(queue, KEY)
    assert (len(queue), queue.pending_after(KEY), queue.retries(KEY)) == (0, None, 0)
    assert registry.get_sample_value("controller_runtime_reconcile_time_seconds_count", {"controller": "test"}) == 1
    assert registry.get_sample_value("controller_runtime_active_workers", {"controller": "test"}) == 0


def test_a_controller_needs_a_worker() -> None:
    async def ok(key: ObjectKey) -> None:
        return None

    with pytest.raises(ValueError, match="worker"):
        controller.Controller("c", ok, workers=0)


async def test_a_worker_stops_when_a_reconcile_swallowed_its_cancellation() -> None:
    """Python 3.11's `asyncio.wait_for` can lose a cancellation that arrives as its awaitable completes; a worker
    whose reconcile lost one must still stop, not wait on its queue for ever (it held up an operator's shutdown)."""
    entered = asyncio.Event()

    async def swallow(key: ObjectKey) -> controller.Result:
        entered.set()
        with contextlib.suppress(asyncio.CancelledError):  # what a lost cancellation looks like to the worker
            await asyncio.sleep(3600)
        return controller.Result()

    ctl, queue, _ = make(swallow)
    queue.add(KEY)
    worker = asyncio.create_task(ctl._work(queue))
    await entered.wait()
    worker.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(worker, 5)
