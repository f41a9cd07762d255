"""The first looks at settled Stacks after a start (pko.controllers.stack.restart): which Stacks are settled, and
the window and delays that spread them."""

from __future__ import annotations

from typing import Any

from pko.api import stack as stack_api
from pko.controllers.stack import restart

READY = [{"type": "Ready", "status": "True", "reason": "ProcessingCompleted", "message": "",
          "lastTransitionTime": "2026-11-27T00:00:00Z"}]


def _stack(request: str = "", **status: Any) -> stack_api.Stack:
    annotations = {"pulumi.com/reconciliation-request": request} if request else {}
    return stack_api.Stack.model_validate({
        "apiVersion": "pulumi.com/v1", "kind": "Stack",
        "metadata": {"name": "s", "namespace": "n", "generation": 2, "annotations": annotations},
        "spec": {"stack": "dev"}, "status": {"observedGeneration": 2, "conditions": READY, **status}})


def test_a_ready_stack_at_its_generation_with_nothing_running_is_settled() -> None:
    assert restart.settled(_stack())


def test_a_stack_with_work_is_not_settled() -> None:
    assert not restart.settled(_stack(conditions=[]))  # not Ready
    assert not restart.settled(_stack(observedGeneration=1))  # a new generation
    assert not restart.settled(_stack(request="now"))  # a sync request not yet observed
    assert not restart.settled(_stack(currentUpdate={"name": "s-1"}))  # an Update runs
    assert not restart.settled(_stack(drift={"currentCheck": "s-2"}))  # a drift check runs


def test_the_window_grows_with_the_fleet_up_to_a_minute() -> None:
    assert restart.window(4) == 0.2
    assert restart.window(1000) == 50
    assert restart.window(100_000) == restart.MAX_WINDOW
    assert restart.window(8, 2.5) == 20


def test_delays_are_fixed_by_name_and_spread_over_the_window() -> None:
    delays = [restart.delay("team", f"s{i}", 1000) for i in range(1000)]
    assert delays == [restart.delay("team", f"s{i}", 1000) for i in range(1000)]  # the same at every restart
    assert all(0 <= d < 50 for d in delays)
    buckets = [sum(1 for d in delays if 10 * b <= d < 10 * (b + 1)) for b in range(5)]
    assert min(buckets) > 150, buckets  # about 200 in each fifth of the window


def test_a_settled_stack_woken_before_its_time_still_waits_and_then_is_looked_at_for_good() -> None:
    looks = restart.FirstLooks(per_stack=2.5)  # a window of 20 s for 8 Stacks
    stack = _stack()
    due = restart.delay("n", "s", 8, 2.5)
    assert due > 2, due  # the name "s" in "n" falls late enough in the window for this test
    assert looks.wait(stack, 8, now=100.0) == due
    # Woken again half a second in (its Workspace's status changed, an informer resync): it still waits.
    assert looks.wait(stack, 8, now=100.5) == due - 0.5
    assert looks.wait(stack, 8, now=100.0 + due) is None  # its time
    assert looks.wait(stack, 8, now=100.0 + due + 0.1) is None  # and from then on, never delayed
    looks.forget("n", "s")
    assert looks.wait(stack, 8, now=100.0 + due + 0.2) is None  # seen again after the window: new, looked at now


def test_a_stack_with_work_or_seen_after_the_window_is_looked_at_at_once() -> None:
    looks = restart.FirstLooks(per_stack=2.5)
    assert looks.wait(_stack(observedGeneration=1), 8, now=0.0) is None  # changed while the operator was down
    assert looks.wait(_stack(), 8, now=0.1) is None  # ... and looked at: its first look is over
    late = restart.FirstLooks(per_stack=2.5)
    late.wait(_stack(conditions=[]), 8, now=0.0)  # the process's first reconcile starts the window
    settled = _stack()
    settled.metadata.name = "other"
    assert late.wait(settled, 8, now=20.0) is None  # the window is over: a Stack seen first now is new
