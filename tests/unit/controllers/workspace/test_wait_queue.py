"""The pool's wait queue kept in order as waiters come, change lane and go (waitqueue.WaitQueue) always agrees with
the order's definition (waitqueue.order: lane, round-robin between namespaces, arrival), whatever the mix of
namespaces and lanes; a place is the waiter's index in that order."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from pko.controllers.workspace import waitqueue
from pko.kube import objects

KEYS = [objects.ObjectKey(namespace, name) for namespace in ("a", "b", "c") for name in ("w1", "w2", "w3")]
operations = st.lists(st.tuples(st.sampled_from(["put", "put", "remove"]), st.sampled_from(KEYS), st.integers(0, 2)),
                      min_size=3, max_size=40)


@settings(deadline=None, max_examples=500)
@given(operations)
def test_the_kept_order_is_the_defined_order(steps: list[tuple[str, objects.ObjectKey, int]]) -> None:
    queue = waitqueue.WaitQueue()
    arrivals = itertools.count()
    for operation, key, lane in steps:
        if operation == "put":
            found = queue.get(key)  # a waiter whose lane changes keeps its arrival
            queue.put(key, waitqueue.Waiter(lane, found.arrival if found is not None else next(arrivals)))
        else:
            was_waiting = key in queue
            assert (queue.remove(key) is not None) == was_waiting
        expected = waitqueue.order(queue.waiters)
        assert queue.order() == expected
        assert [queue.place(k) for k in expected] == list(range(len(expected)))
        assert len(queue) == len(expected)


def test_one_namespace_in_a_lane_is_arrival_order_and_taking_one_out_keeps_the_rest() -> None:
    queue = waitqueue.WaitQueue()
    keys = [objects.ObjectKey("a", f"w{i}") for i in range(5)]
    for arrival, key in reversed(list(enumerate(keys))):  # arriving in any order, kept by arrival
        queue.put(key, waitqueue.Waiter(1, arrival))
    assert queue.order() == keys
    assert queue.remove(keys[2]) == waitqueue.Waiter(1, 2)
    assert queue.remove(keys[2]) is None
    assert queue.order() == keys[:2] + keys[3:]
    queue.put(objects.ObjectKey("b", "x"), waitqueue.Waiter(1, 9))  # a second namespace: round-robin
    assert queue.order() == [keys[0], objects.ObjectKey("b", "x"), keys[1], keys[3], keys[4]]
