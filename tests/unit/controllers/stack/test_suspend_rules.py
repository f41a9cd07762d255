"""Suspend (pko, `spec.suspend`): a suspended Stack starts no update and says so — `Reconciling=False` with reason
`Suspended`, `Ready` kept — except that an Update which finished while suspended still reports its outcome.
Deleting is never suspended."""

from __future__ import annotations

import datetime
from typing import Any

from pko.api import conditions
from pko.api import stack as stack_api
from pko.api.meta import Condition
from pko.controllers.stack import sync

NOW = datetime.datetime(2026, 11, 22, 12, 0, tzinfo=datetime.UTC)
EARLIER = datetime.datetime(2026, 11, 22, 11, 0, tzinfo=datetime.UTC)


def _stack(suspend: bool | None, deleting: bool = False) -> stack_api.Stack:
    meta: dict[str, Any] = {"name": "s", "generation": 2}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-22T11:59:00Z"
    spec: dict[str, Any] = {"stack": "dev"}
    if suspend is not None:
        spec["suspend"] = suspend
    return stack_api.Stack.model_validate({"metadata": meta, "spec": spec})


def _last(state: str, failures: int = 0) -> stack_api.StackUpdateState:
    return stack_api.StackUpdateState(generation=1, state=state, type="up", failures=failures or None,
                                      last_resync_time="2026-11-22T11:59:00Z")


def _conditions(found: list[Condition]) -> dict[str, tuple[str, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in found}


SUSPENDED = ("False", "Suspended",
             "the stack is suspended (spec.suspend is true): no new update starts until it is false")


def test_suspend_applies_only_when_true_and_not_deleting() -> None:
    assert sync.is_suspended(_stack(True))
    assert not sync.is_suspended(_stack(False))
    assert not sync.is_suspended(_stack(None))
    assert not sync.is_suspended(_stack(True, deleting=True))


def test_ready_keeps_its_value_while_suspended() -> None:
    ready = conditions.mark_ready(None, now=EARLIER)
    found = sync.mark_suspended(ready, _last("succeeded"), False, NOW)
    assert _conditions(found) == {"Ready": ("True", "ProcessingCompleted",
                                            "the stack has been processed and is up to date"),
                                  "Reconciling": SUSPENDED}
    assert conditions.find(found, "Ready").last_transition_time == "2026-11-22T11:00:00Z"  # type: ignore[union-attr]


def test_a_stalled_stack_stays_stalled_while_suspended() -> None:
    stalled = sync.mark_result(None, _last("failed", 3), EARLIER)
    found = _conditions(sync.mark_suspended(stalled, _last("failed", 3), False, NOW))
    assert found["Stalled"][:2] == ("True", "UpdateFailed")
    assert found["Ready"][:2] == ("False", "NotReadyStalled")
    assert found["Reconciling"] == SUSPENDED


def test_an_update_finished_while_suspended_reports_its_outcome() -> None:
    running = conditions.mark_reconciling(None, conditions.RECONCILING_PROCESSING, "stack is being processed",
                                          now=EARLIER)
    succeeded = _conditions(sync.mark_suspended(running, _last("succeeded"), True, NOW))
    assert succeeded == {"Ready": ("True", "ProcessingCompleted", "the stack has been processed and is up to date"),
                         "Reconciling": SUSPENDED}
    failed = _conditions(sync.mark_suspended(running, _last("failed", 3), True, NOW))
    assert failed["Stalled"][:2] == ("True", "UpdateFailed")
    assert failed["Reconciling"] == SUSPENDED
    # with the Stack's own limit
    own = _conditions(sync.mark_suspended(running, _last("failed", 1), True, NOW,
                                          policy=sync.RetryPolicy(max_failures=1)))
    assert own["Stalled"][:2] == ("True", "UpdateFailed")


def test_the_suspended_transition_is_seen_once() -> None:
    assert not sync.shows_suspended(None)
    assert not sync.shows_suspended(conditions.mark_ready(None, now=NOW))
    suspended = sync.mark_suspended(None, None, False, NOW)
    assert sync.shows_suspended(suspended)
    assert not sync.shows_suspended(conditions.mark_reconciling(suspended, conditions.RECONCILING_PROCESSING,
                                                                "stack is being processed", now=NOW))


def test_an_update_in_flight_says_none_follows_it() -> None:
    assert sync.processing_message(_stack(True)) == (
        "stack is being processed; the stack is suspended: no update starts after this one")
    assert sync.processing_message(_stack(None)) == "stack is being processed"
