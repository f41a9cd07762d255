"""The pool of active workspaces (pko.controllers.workspace.pool) and its inputs: the queue's order (lane, then
round-robin between namespaces, then arrival), who is granted a slot and who waits, which idle holders give theirs
back (least recently used first; never a busy one), the seed after a restart, the lane of an Update
(pko.api.lanes) and when a holder counts as idle (fleet.last_used)."""

from __future__ import annotations

import collections
import datetime
from typing import Any

import pytest

from pko.api import lanes
from pko.api import update as up_api
from pko.api.meta import Condition
from pko.controllers.workspace import fleet, pool
from pko.controllers.workspace import setup as workspace_setup
from pko.kube import objects
from pko.runtime import store

NOW = datetime.datetime(2026, 11, 27, 12, 0, 0, tzinfo=datetime.UTC)


def _key(name: str, namespace: str = "team-a") -> objects.ObjectKey:
    return objects.ObjectKey(namespace, name)


class _Woken(list[objects.ObjectKey]):
    def __call__(self, key: objects.ObjectKey) -> None:
        self.append(key)


def _pool(size: int, seed: tuple[objects.ObjectKey, ...] = ()) -> tuple[pool.Pool, _Woken]:
    woken = _Woken()
    return pool.Pool(size, woken, seed=lambda: seed), woken


def test_a_pool_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        pool.Pool(0, lambda key: None)


def test_slots_are_granted_until_the_pool_is_full_then_workspaces_wait_in_order() -> None:
    active, _ = _pool(2)
    assert active.claim(_key("a"), lanes.CHANGE) is pool.GRANTED
    assert active.claim(_key("b"), lanes.CHANGE) is pool.GRANTED
    assert active.claim(_key("a"), lanes.CHANGE) is pool.GRANTED  # a holder asking again keeps its slot
    third = active.claim(_key("c"), lanes.CHANGE)
    fourth = active.claim(_key("d"), lanes.CHANGE)
    assert third == pool.Queued(1, 1, 2, lanes.CHANGE)
    assert fourth == pool.Queued(2, 2, 2, lanes.CHANGE)
    assert fourth.message() == ("waiting for a workspace slot (change lane): all 2 slots of --max-active-workspaces "
                                "are busy; place in the queue: 2 of 2")
    assert (active.active(), active.waiting()) == (2, 2)


def test_a_released_slot_goes_to_the_head_of_the_queue_not_to_whoever_asks_first() -> None:
    active, woken = _pool(1)
    active.claim(_key("a"), lanes.CHANGE)
    active.claim(_key("b"), lanes.CHANGE)
    active.claim(_key("c"), lanes.CHANGE)
    woken.clear()
    active.release(_key("a"))
    assert woken == [_key("b")]
    assert active.claim(_key("c"), lanes.CHANGE) == pool.Queued(2, 2, 1, lanes.CHANGE)  # c may not overtake b
    assert active.claim(_key("b"), lanes.CHANGE) is pool.GRANTED
    assert active.claim(_key("c"), lanes.CHANGE) == pool.Queued(1, 1, 1, lanes.CHANGE)


def test_a_slot_whose_agent_is_still_stopping_stays_taken_until_it_is_released_again() -> None:
    """A pod terminating after its scale to zero is still on the node: its slot goes to the queue once it is gone,
    not when the agent was told to stop (a pool of 20 had 36 workspace pods on the node at once)."""
    active, woken = _pool(1)
    active.claim(_key("a"), lanes.CHANGE)
    active.claim(_key("b"), lanes.CHANGE)
    woken.clear()
    active.release(_key("a"), yielded=True, draining=True)
    assert woken == []
    assert active.stopping(_key("a"))
    assert not active.holds(_key("a"))
    assert active.claim(_key("b"), lanes.CHANGE) == pool.Queued(1, 1, 1, lanes.CHANGE)
    assert (active.active(), active.yielded) == (1, 1)
    assert not active.must_yield(_key("a"))  # already giving it back: nobody else is asked to
    active.release(_key("a"), draining=True)  # looked again: still stopping
    assert woken == []
    assert active.stopping(_key("a"))
    active.release(_key("a"))  # gone
    assert woken == [_key("b")]
    assert not active.stopping(_key("a"))
    assert active.active() == 0
    assert active.claim(_key("b"), lanes.CHANGE) is pool.GRANTED
    assert active.yielded == 1  # counted once


def test_a_key_that_holds_no_slot_never_starts_draining() -> None:
    active, _ = _pool(1)
    active.release(_key("a"), draining=True)
    assert not active.stopping(_key("a"))
    assert active.claim(_key("a"), lanes.CHANGE) is pool.GRANTED


def test_the_queue_orders_lanes_then_namespaces_round_robin_then_arrival() -> None:
    waiters = {}
    for arrival, (name, namespace, lane) in enumerate([
            ("big-1", "big", lanes.CHANGE), ("big-2", "big", lanes.CHANGE), ("big-3", "big", lanes.CHANGE),
            ("small-1", "small", lanes.CHANGE), ("resync", "small", lanes.RESYNC), ("retry", "big", lanes.RETRY),
            ("gone", "big", lanes.DESTROY), ("small-2", "small", lanes.CHANGE)]):
        waiters[_key(name, namespace)] = pool.Waiter(lane, arrival)
    assert [k.name for k in pool.order(waiters)] == [
        "gone", "big-1", "small-1", "big-2", "small-2", "big-3", "retry", "resync"]


def test_a_waiter_whose_lane_changes_keeps_its_arrival() -> None:
    active, _ = _pool(1)
    active.claim(_key("holder"), lanes.CHANGE)
    active.claim(_key("first"), lanes.RESYNC)
    active.claim(_key("second"), lanes.RESYNC)
    assert active.claim(_key("second"), lanes.DESTROY) == pool.Queued(1, 2, 1, lanes.DESTROY)
    assert active.claim(_key("first"), lanes.DESTROY) == pool.Queued(1, 2, 1, lanes.DESTROY)  # arrived first


def test_idle_holders_give_their_slot_back_least_recently_used_first_and_busy_ones_never() -> None:
    active, woken = _pool(3)
    for name in ("busy", "old", "recent"):
        active.claim(_key(name), lanes.CHANGE)
    active.used(_key("busy"), None)
    active.used(_key("old"), 100.0)
    active.used(_key("recent"), 200.0)
    assert not any(active.must_yield(_key(n)) for n in ("busy", "old", "recent"))  # nobody waits
    active.claim(_key("w1"), lanes.CHANGE)
    assert woken == [_key("old")]  # asked to look at itself
    assert [n for n in ("busy", "old", "recent") if active.must_yield(_key(n))] == ["old"]
    active.claim(_key("w2"), lanes.CHANGE)
    active.claim(_key("w3"), lanes.CHANGE)
    assert [n for n in ("busy", "old", "recent") if active.must_yield(_key(n))] == ["old", "recent"]
    woken.clear()
    active.release(_key("old"), yielded=True)
    assert woken == [_key("w1")]
    assert active.yielded == 1
    assert active.claim(_key("w1"), lanes.CHANGE) is pool.GRANTED
    assert not active.must_yield(_key("busy"))


def test_a_holder_asked_to_yield_that_turns_out_busy_has_the_next_idle_one_asked_in_its_place() -> None:
    """A new Update does not wake a holder (setup.not_for_holders): the pool may think it idle and ask it to yield;
    when it says it is busy, the next least recently used idle holder is asked, not left until the queue moves."""
    active, woken = _pool(2)
    for name in ("old", "recent"):
        active.claim(_key(name), lanes.CHANGE)
    active.used(_key("old"), 100.0)
    active.used(_key("recent"), 200.0)
    active.claim(_key("w"), lanes.CHANGE)
    assert woken == [_key("old")]
    woken.clear()
    active.used(_key("old"), None)  # its reconcile: an Update came
    assert woken == [_key("recent")]
    assert active.must_yield(_key("recent"))
    assert not active.must_yield(_key("old"))
    woken.clear()
    active.used(_key("old"), None)  # busy again: no change, nobody else is asked
    active.used(_key("recent"), 250.0)  # idle to idle: neither
    assert woken == []


def test_a_busy_holder_asks_nobody_when_nobody_waits() -> None:
    active, woken = _pool(2)
    active.claim(_key("a"), lanes.CHANGE)
    active.claim(_key("b"), lanes.CHANGE)
    active.used(_key("a"), 100.0)
    active.used(_key("b"), 200.0)
    active.used(_key("a"), None)
    assert woken == []


def _update_event(type_: str, complete: bool = False) -> store.Event:
    status = {"conditions": [{"type": "Complete", "status": "True"}]} if complete else {}
    return store.Event(type_, {"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update",
                               "metadata": {"name": "u", "namespace": "team-a"}, "status": status})


def test_a_new_update_wakes_its_workspace_unless_that_holds_a_slot() -> None:
    holder, asleep = _key("holder"), _key("asleep")
    holds = {holder}.__contains__
    assert workspace_setup.not_for_holders(_update_event("ADDED"), [holder, asleep], holds) == [asleep]
    # its end, its deletion, or one created complete (seen at a restart) still wake a holder
    for event in (_update_event("MODIFIED", complete=True), _update_event("DELETED"),
                  _update_event("ADDED", complete=True)):
        assert workspace_setup.not_for_holders(event, [holder, asleep], holds) == [holder, asleep]


def test_a_waiter_that_no_longer_waits_leaves_the_queue() -> None:
    active, _ = _pool(1)
    active.claim(_key("a"), lanes.CHANGE)
    active.claim(_key("b"), lanes.CHANGE)
    active.claim(_key("c"), lanes.CHANGE)
    active.release(_key("b"))
    assert active.claim(_key("c"), lanes.CHANGE) == pool.Queued(1, 1, 1, lanes.CHANGE)


def test_the_seed_counts_the_agents_that_already_run_and_a_smaller_pool_drains_as_they_go_idle() -> None:
    active, _ = _pool(2, seed=(_key("x"), _key("y"), _key("z")))
    assert active.holds(_key("x"))
    assert active.claim(_key("new"), lanes.CHANGE) == pool.Queued(1, 1, 2, lanes.CHANGE)
    active.used(_key("x"), 10.0)
    active.used(_key("y"), 20.0)
    active.used(_key("z"), None)
    assert [n for n in "xyz" if active.must_yield(_key(n))] == ["x", "y"]  # one over, plus one waiter
    active.release(_key("x"), yielded=True)
    active.release(_key("y"), yielded=True)
    assert active.claim(_key("new"), lanes.CHANGE) is pool.GRANTED
    assert active.active() == 2


def _update(kind: str = "up", message: str = "", drift: bool = False) -> up_api.Update:
    labels = {up_api.LABEL_DRIFT_CHECK: "true"} if drift else {}
    return up_api.Update.model_validate({"metadata": {"name": "u", "labels": labels},
                                         "spec": {"type": kind, "message": message}})


@pytest.mark.parametrize(("update", "lane"), [
    (_update("destroy", "Stack marked for deletion"), lanes.DESTROY),
    (_update(message="Initial stack update"), lanes.CHANGE),
    (_update(message="New commit detected: \"abc\""), lanes.CHANGE),
    (_update(message="New stack generation: 4"), lanes.CHANGE),
    (_update(message="Backoff time elapsed: 30s"), lanes.RETRY),
    (_update(message="Stalled retry interval elapsed: 1h0m0s"), lanes.RETRY),
    (_update(message="Resync time elapsed: 1m0s"), lanes.RESYNC),
    (_update("preview", drift=True), lanes.RESYNC),
])
def test_the_lane_of_an_update(update: up_api.Update, lane: int) -> None:
    assert lanes.of_update(update) == lane


def test_the_most_urgent_pending_update_decides_and_none_is_a_change() -> None:
    assert lanes.of_updates([]) == lanes.CHANGE
    assert lanes.of_updates([_update(message="Resync time elapsed: 1m0s"), _update("destroy")]) == lanes.DESTROY


def _condition(kind: str, status: str, reason: str, since: datetime.datetime) -> Condition:
    return Condition.model_validate({"type": kind, "status": status, "reason": reason, "message": "",
                                     "lastTransitionTime": since.strftime("%Y-%m-%dT%H:%M:%SZ")})


def _run(complete_at: datetime.datetime | None, **meta: Any) -> up_api.Update:
    found = [] if complete_at is None else [
        {"type": "Complete", "status": "True", "reason": "Updated", "message": "",
         "lastTransitionTime": complete_at.strftime("%Y-%m-%dT%H:%M:%SZ")}]
    return up_api.Update.model_validate({"metadata": {"name": "u", **meta}, "status": {"conditions": found}})


def test_when_a_holder_counts_as_idle() -> None:
    second = datetime.timedelta(seconds=1)
    ready = _condition("Ready", "True", "Succeeded", NOW - 10 * second)
    # ran an update since it became ready: idle since it completed
    assert fleet.last_used(NOW, ready, None, [_run(NOW - 5 * second)]) == NOW - 5 * second
    # an update pending: busy
    assert fleet.last_used(NOW, ready, None, [_run(NOW - 5 * second), _run(None)]) is None
    # just ready, its Stack has not made its update yet: busy for the grace period, then idle
    assert fleet.last_used(NOW, ready, None, [_run(NOW - 60 * second)]) is None
    long_ready = _condition("Ready", "True", "Succeeded", NOW - (fleet.FIRST_UPDATE_GRACE + 1) * second)
    assert fleet.last_used(NOW, long_ready, None, []) == NOW - (fleet.FIRST_UPDATE_GRACE + 1) * second
    # starting (or failing for a reason that may pass): busy
    assert fleet.last_used(NOW, _condition("Ready", "False", "Initializing", NOW), None, []) is None
    # Stalled: it cannot work until its spec changes
    stalled = _condition("Stalled", "True", "InitializationFailed", NOW - 3 * second)
    failed = _condition("Ready", "False", "InitializationFailed", NOW - 3 * second)
    assert fleet.last_used(NOW, failed, stalled, []) == NOW - 3 * second
    # ... even with an Update pending on it, which cannot run before then (the slot would be held for ever)
    assert fleet.last_used(NOW, failed, stalled, [_run(None)]) == NOW - 3 * second


def test_an_idle_holder_gives_its_slot_once_another_s_agent_drains_for_too_long() -> None:
    """A waiter behind a slot that drains, and idle holders. While the slot drains as it should (seconds), it is the
    waiter's: no other holder is asked (one waiter must not stop every idle agent). Once it drains for too long (a
    pod stuck terminating on a lost node), the least recently used idle holder is asked instead."""
    now = [0.0]
    active = pool.Pool(3, _Woken(), clock=lambda: now[0])
    for name in ("idle", "idler", "stopping"):
        active.claim(_key(name), lanes.CHANGE)
    active.used(_key("idle"), 100.0)
    active.used(_key("idler"), 50.0)
    active.release(_key("stopping"), yielded=True, draining=True)
    assert active.claim(_key("waiter"), lanes.CHANGE) == pool.Queued(1, 1, 3, lanes.CHANGE)
    assert not active.must_yield(_key("idle"))
    assert not active.must_yield(_key("idler"))
    now[0] = pool.STUCK_DRAINING + 1
    assert active.must_yield(_key("idler"))
    assert not active.must_yield(_key("idle"))


def test_a_new_term_of_leadership_starts_the_pool_afresh_from_the_workspaces() -> None:
    """Another replica led in between: the holders, waiters and draining slots this one kept are stale (it never
    saw what the other started or stopped); it forgets them and is seeded again from the Workspaces' statuses."""
    seed = [_key("running-now")]
    woken = _Woken()
    active = pool.Pool(2, woken, seed=lambda: list(seed))
    assert active.claim(_key("a"), lanes.CHANGE) is pool.GRANTED  # seeded with running-now, then a
    active.claim(_key("b"), lanes.CHANGE)
    active.release(_key("a"), draining=True)
    assert (active.active(), active.waiting()) == (2, 1)
    seed[:] = [_key("b"), _key("c")]  # what the other leader left running
    active.reset()
    assert active.holds(_key("b"))
    assert active.holds(_key("c"))
    assert not active.holds(_key("running-now"))
    assert (active.active(), active.waiting()) == (2, 0)
    assert active.claim(_key("d"), lanes.CHANGE) == pool.Queued(1, 1, 2, lanes.CHANGE)


def _placed(name: str, reason: str | None, *, stalled: bool = False, address: str | None = "10.0.0.1:50051",
            deleting: bool = False) -> dict[str, Any]:
    found = [] if reason is None else [{"type": "Ready", "status": "True" if reason == "Succeeded" else "False",
                                        "reason": reason, "message": "", "lastTransitionTime": "2026-11-27T12:00:00Z"}]
    if stalled:
        found.append({"type": "Stalled", "status": "True", "reason": reason or "", "message": "",
                      "lastTransitionTime": "2026-11-27T12:00:00Z"})
    meta: dict[str, Any] = {"name": name, "namespace": "team-a", "uid": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T12:00:00Z"
    status: dict[str, Any] = {"conditions": found}
    if address:
        status["address"] = address
    return {"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace", "metadata": meta, "status": status}


def test_the_seed_after_a_restart_is_the_workspaces_whose_agent_runs() -> None:
    found = store.Store()
    for obj in (_placed("running", "Succeeded"), _placed("starting", "Initializing"), _placed("asleep", "Sleeping"),
                _placed("waiting", "Queued"), _placed("new", None), _placed("gone", "Succeeded", deleting=True),
                _placed("stalled-stopped", "InitializationFailed", stalled=True, address=None),
                _placed("stalled-running", "InitializationFailed", stalled=True)):
        found.upsert(obj)
    assert sorted(k.name for k in workspace_setup.running(found)) == ["running", "stalled-running", "starting"]


def test_a_queued_place_is_written_again_near_the_front_or_once_it_moved_by_three_quarters() -> None:
    def shown(position: int, waiting: int = 180, lane: int = lanes.CHANGE) -> str:
        return pool.Queued(position, waiting, 20, lane).message()

    assert lanes.queued_place(shown(41)) == 41
    assert lanes.queued_place("waiting for something else") is None
    assert pool.worth_writing(None, pool.Queued(41, 180, 20, lanes.CHANGE))
    assert not pool.worth_writing(shown(41), pool.Queued(41, 180, 20, lanes.CHANGE))
    assert not pool.worth_writing(shown(41), pool.Queued(36, 170, 20, lanes.CHANGE))  # 5 places: a tenth, not more
    assert not pool.worth_writing(shown(41), pool.Queued(31, 170, 20, lanes.CHANGE))  # 10: a quarter
    assert not pool.worth_writing(shown(41), pool.Queued(20, 170, 20, lanes.CHANGE))  # 21: half, not yet
    assert not pool.worth_writing(shown(100), pool.Queued(26, 170, 20, lanes.CHANGE))  # 74: less than 3/4
    assert pool.worth_writing(shown(100), pool.Queued(25, 170, 20, lanes.CHANGE))  # 75: three quarters
    assert pool.worth_writing(shown(41), pool.Queued(10, 170, 20, lanes.CHANGE))  # among the first ten
    assert pool.worth_writing(shown(12), pool.Queued(10, 170, 20, lanes.CHANGE))  # near the front: every place
    assert pool.worth_writing(shown(41), pool.Queued(41, 180, 20, lanes.RETRY))  # another lane
    assert pool.worth_writing(shown(41), pool.Queued(41, 180, 30, lanes.CHANGE))  # a pool resized
    assert pool.worth_writing("waiting for something else", pool.Queued(41, 180, 20, lanes.CHANGE))


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _queue_of(size: int, count: int) -> tuple[pool.Pool, _Woken, list[objects.ObjectKey], _Clock,
                                              list[tuple[objects.ObjectKey, float]]]:
    """A full pool of `size` with `count` waiters, each told its place (1..count) at the clock's time; wakes for
    later are recorded with their delay."""
    clock, later = _Clock(), []
    woken = _Woken()
    active = pool.Pool(size, woken, wake_later=lambda key, delay: later.append((key, delay)), clock=clock)
    for i in range(size):
        active.claim(_key(f"holder{i}"), lanes.CHANGE)
    waiters = [_key(f"w{i:02d}") for i in range(count)]
    for place, key in enumerate(waiters, 1):
        assert active.claim(key, lanes.CHANGE) == pool.Queued(place, place, size, lanes.CHANGE)
    woken.clear()
    return active, woken, waiters, clock, later


def test_as_the_queue_moves_each_waiter_is_woken_when_its_place_moved_enough_to_show() -> None:
    active, woken, waiters, clock, later = _queue_of(1, 40)
    clock.now += pool.SHOW_EVERY
    active.release(_key("holder0"))
    assert woken == [waiters[0]]  # the head, for the slot
    woken.clear()
    assert active.claim(waiters[0], lanes.CHANGE) is pool.GRANTED
    # everyone moved up a place: among the first ten every move shows; further back, not yet
    assert woken == waiters[1:11]
    counts = collections.Counter(woken)
    for grant in range(1, 20):
        for key in woken:  # each woken waiter looks (its reconcile) and is told its place
            active.claim(key, lanes.CHANGE)
        woken.clear()
        clock.now += pool.SHOW_EVERY
        active.release(waiters[grant - 1])
        assert active.claim(waiters[grant], lanes.CHANGE) is pool.GRANTED
        counts.update(woken)
    # after 20 grants: the last waiter (told 40) is at 20, half: not woken (not at 30, a quarter, nor at 20); one
    # told 30 was woken at 10 (among the first ten; 7 would be three quarters); one told 25 at every place from 10
    # to 5
    assert counts[waiters[39]] == 0
    assert counts[waiters[29]] == 1
    assert counts[waiters[24]] == 6
    assert later == []  # each had been told more than SHOW_EVERY before
    assert active.claim(waiters[39], lanes.CHANGE) == pool.Queued(20, 20, 1, lanes.CHANGE)


def test_a_waiter_is_woken_to_show_its_place_at_most_every_show_every_seconds_but_a_slot_never_waits() -> None:
    active, woken, waiters, clock, later = _queue_of(1, 20)
    active.release(_key("holder0"))
    assert woken == [waiters[0]]  # the slot: at once, though the head was told its place just now
    woken.clear()
    assert active.claim(waiters[0], lanes.CHANGE) is pool.GRANTED
    # the first ten moved, but were told their place just now: each is woken once SHOW_EVERY is up, not now
    assert woken == []
    assert later == [(key, pool.SHOW_EVERY) for key in waiters[1:11]]
    later.clear()
    clock.now += 4
    for grant in range(1, 4):  # more grants before they looked: the moves are shown together, no wake is added
        active.release(waiters[grant - 1])
        assert woken == [waiters[grant]]
        woken.clear()
        assert active.claim(waiters[grant], lanes.CHANGE) is pool.GRANTED
    # only those not woken yet: the three newly among the first ten, each once (15 → 11 and 16 → 12 moved by a
    # quarter, less than half: not woken)
    assert later == [(key, pool.SHOW_EVERY - 4) for key in waiters[11:14]]
    assert active.claim(waiters[10], lanes.CHANGE) == pool.Queued(7, 16, 1, lanes.CHANGE)


def test_a_more_urgent_newcomer_moves_the_waiters_behind_it_and_those_near_the_front_are_woken() -> None:
    active, woken, waiters, clock, _ = _queue_of(1, 20)
    clock.now += pool.SHOW_EVERY
    assert active.claim(_key("destroy"), lanes.DESTROY) == pool.Queued(1, 21, 1, lanes.DESTROY)
    # places 1..9 became 2..10 and show; 10 became 11, which is no longer near the front and moved too little
    assert woken == waiters[:9]
    woken.clear()
    assert active.claim(waiters[0], lanes.CHANGE) == pool.Queued(2, 21, 1, lanes.CHANGE)
    assert woken == []  # asking again changes nothing


def test_only_a_workspace_without_a_stack_posts_its_own_queued_event() -> None:
    from pko.api import stack as stack_api
    from pko.api import workspace as ws_api

    def workspace(*owners: dict[str, Any]) -> ws_api.Workspace:
        return ws_api.Workspace.model_validate({"metadata": {"name": "w", "namespace": "ns",
                                                             "ownerReferences": list(owners)}, "spec": {}})

    stack = {"apiVersion": stack_api.API_VERSION, "kind": stack_api.KIND, "name": "w", "uid": "u", "controller": True}
    assert pool.stack_tells(workspace(stack))  # its Stack says StackQueued
    assert not pool.stack_tells(workspace())  # made by hand: it says Queued itself
    assert not pool.stack_tells(workspace({**stack, "controller": False}))
    assert not pool.stack_tells(workspace({**stack, "kind": "Deployment", "apiVersion": "apps/v1"}))


def test_with_a_timer_the_queue_is_looked_through_at_most_every_scan_every_seconds() -> None:
    """A pool that can defer (the event loop's call_later) looks for waiters to wake once for the changes that come
    within SCAN_EVERY of its last look, when that time is up; the head of the queue is woken for a slot at once."""
    clock, later, deferred = _Clock(), [], []
    woken = _Woken()
    active = pool.Pool(1, woken, wake_later=lambda key, delay: later.append((key, delay)), clock=clock,
                       defer=lambda delay, run: deferred.append((delay, run)))
    active.claim(_key("holder"), lanes.CHANGE)
    waiters = [_key(f"w{i:02d}") for i in range(20)]
    for place, key in enumerate(waiters, 1):
        assert active.claim(key, lanes.CHANGE) == pool.Queued(place, place, 1, lanes.CHANGE)
    assert [delay for delay, _ in deferred] == [pool.SCAN_EVERY]  # the first arrival looked; the others wait for one
    clock.now += pool.SHOW_EVERY
    active.release(_key("holder"))
    assert woken == [waiters[0]]  # the slot: at once
    woken.clear()
    assert active.claim(waiters[0], lanes.CHANGE) is pool.GRANTED
    assert woken == []  # the places moved, but the look owed is not due yet
    assert len(deferred) == 1
    _, run = deferred.pop()
    run()  # its time is up: one look, for every change meanwhile
    assert woken == waiters[1:11]
    for key in woken:  # each looks, and is told its new place
        active.claim(key, lanes.CHANGE)
    woken.clear()
    clock.now += pool.SHOW_EVERY
    active.release(waiters[0])
    assert woken == [waiters[1]]
    woken.clear()
    assert active.claim(waiters[1], lanes.CHANGE) is pool.GRANTED  # long after the last look: looked through now
    assert woken == waiters[2:12]
    assert deferred == []


def test_a_look_that_could_not_be_deferred_is_not_counted_as_owed() -> None:
    clock, deferred = _Clock(), []
    woken = _Woken()

    def defer(delay: float, run: Any) -> None:
        if not deferred:
            deferred.append((delay, run))
            raise RuntimeError("no running event loop")
        deferred.append((delay, run))

    active = pool.Pool(1, woken, clock=clock, defer=defer)
    with pytest.raises(RuntimeError, match="no running event loop"):
        active.claim(_key("holder"), lanes.CHANGE)  # a look now, then a grant whose look cannot be deferred
    active.claim(_key("w0"), lanes.CHANGE)  # the next change defers its look again: none was counted as owed
    assert [delay for delay, _ in deferred] == [pool.SCAN_EVERY, pool.SCAN_EVERY]
