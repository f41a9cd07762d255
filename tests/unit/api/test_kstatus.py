"""The kstatus ready protocol: Ready / Reconciling / Stalled transitions, exactly as the Go operator makes them."""

from __future__ import annotations

import datetime

import pytest

from pko.api import conditions
from pko.api.meta import Condition

T0 = datetime.datetime(2026, 1, 1, 0, 0, 0, tzinfo=datetime.UTC)
T1 = T0 + datetime.timedelta(minutes=5, microseconds=123)


def _by_type(items: list[Condition]) -> dict[str, tuple[str, str, str, str]]:
    return {c.type: (c.status, c.reason, c.message, c.last_transition_time) for c in items}


def test_mark_reconciling_from_nothing() -> None:
    result = conditions.mark_reconciling(None, conditions.RECONCILING_PROCESSING,
                                         conditions.MESSAGE_WAITING_FOR_WORKSPACE, now=T0)
    assert _by_type(result) == {
        "Ready": ("False", "NotReadyInProgress", "reconciliation is in progress", "2026-01-01T00:00:00Z"),
        "Reconciling": ("True", "StackProcessing", "waiting for workspace readiness", "2026-01-01T00:00:00Z"),
    }
    assert [c.type for c in result] == ["Ready", "Reconciling"]


def test_mark_stalled_drops_reconciling() -> None:
    start = conditions.mark_reconciling(None, conditions.RECONCILING_RETRY, conditions.retrying_message(2), now=T0)
    result = conditions.mark_stalled(start, conditions.STALLED_UPDATE_FAILED,
                                     conditions.update_failed_message("up", 3), now=T1)
    assert _by_type(result) == {
        # Ready stays False: its transition time does not move.
        "Ready": ("False", "NotReadyStalled", "reconciliation is stalled", "2026-01-01T00:00:00Z"),
        "Stalled": ("True", "UpdateFailed", "up failed 3 times; not retrying until the spec or source changes",
                    "2026-01-01T00:05:00Z"),
    }


def test_mark_ready_drops_both_and_flips_ready() -> None:
    stalled = conditions.mark_stalled(None, conditions.STALLED_SPEC_INVALID, "bad", now=T0)
    result = conditions.mark_ready(stalled, now=T1)
    assert _by_type(result) == {
        "Ready": ("True", "ProcessingCompleted", "the stack has been processed and is up to date",
                  "2026-01-01T00:05:00Z"),
    }


def test_reconciling_after_stalled_drops_stalled() -> None:
    stalled = conditions.mark_stalled(None, conditions.STALLED_SOURCE_UNAVAILABLE, "no such repo", now=T0)
    result = conditions.mark_reconciling(stalled, conditions.RECONCILING_PREVIEW_FAILED,
                                         conditions.preview_failed_message(1), now=T1)
    assert set(_by_type(result)) == {"Ready", "Reconciling"}
    assert _by_type(result)["Reconciling"][2] == "preview failed (1 attempt(s))"


def test_set_condition_keeps_position_and_transition_time_when_status_is_unchanged() -> None:
    first = conditions.set_condition(None, "A", "True", "R1", "m1", now=T0)
    first = conditions.set_condition(first, "B", "False", "R2", "m2", now=T0)
    again = conditions.set_condition(first, "A", "True", "R3", "m3", now=T1, observed_generation=4)
    assert [c.type for c in again] == ["A", "B"]
    assert again[0].last_transition_time == "2026-01-01T00:00:00Z"
    assert (again[0].reason, again[0].message, again[0].observed_generation) == ("R3", "m3", 4)
    flipped = conditions.set_condition(again, "A", "False", "R3", "m3", now=T1)
    assert flipped[0].last_transition_time == "2026-01-01T00:05:00Z"
    assert flipped[0].observed_generation is None  # like Go: an unset observedGeneration overwrites


def test_inputs_are_never_mutated() -> None:
    original = conditions.mark_reconciling(None, conditions.RECONCILING_PROCESSING, "x", now=T0)
    snapshot = [c.model_dump() for c in original]
    conditions.mark_ready(original, now=T1)
    conditions.mark_stalled(original, conditions.STALLED_WORKSPACE_FAILED, "y", now=T1)
    conditions.set_condition(original, "Ready", "True", "Z", "z", now=T1)
    assert [c.model_dump() for c in original] == snapshot


def test_queries() -> None:
    ready = conditions.mark_ready(None, now=T0)
    assert conditions.is_true(ready, conditions.READY)
    assert not conditions.is_true(ready, conditions.STALLED)
    assert conditions.find(ready, conditions.STALLED) is None
    assert conditions.remove(ready, conditions.READY) == []


def test_times_are_utc_whole_seconds() -> None:
    local = datetime.datetime(2026, 1, 1, 2, 0, 0, 999_999, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    assert conditions.format_time(local) == "2026-01-01T00:00:00Z"
    with pytest.raises(ValueError, match="timezone"):
        conditions.format_time(datetime.datetime(2026, 1, 1))


def test_reason_and_message_constants() -> None:
    assert (conditions.NOT_READY_IN_PROGRESS, conditions.NOT_READY_STALLED, conditions.READY_COMPLETED) == (
        "NotReadyInProgress", "NotReadyStalled", "ProcessingCompleted")
    assert (conditions.RECONCILING_PROCESSING, conditions.RECONCILING_RETRY, conditions.RECONCILING_PREVIEW_FAILED,
            conditions.RECONCILING_PREREQUISITE_NOT_SATISFIED) == (
        "StackProcessing", "RetryingAfterFailure", "PreviewFailed", "PrerequisiteNotSatisfied")
    assert (conditions.STALLED_SPEC_INVALID, conditions.STALLED_SOURCE_UNAVAILABLE,
            conditions.STALLED_PULUMI_VERSION_TOO_LOW, conditions.STALLED_WORKSPACE_FAILED,
            conditions.STALLED_UPDATE_FAILED, conditions.STALLED_NAMESPACE_TERMINATING,
            conditions.STALLED_CONFLICT) == (
        "SpecInvalid", "SourceUnavailable", "PulumiVersionTooLow", "WorkspaceFailed", "UpdateFailed",
        "NamespaceTerminating", "UpdateConflict")
    assert conditions.MESSAGE_STACK_PROCESSING == "stack is being processed"
    assert conditions.retrying_message(3) == "3 update failure(s)"
    assert (conditions.COMPLETE, conditions.FAILED, conditions.PROGRESSING) == ("Complete", "Failed", "Progressing")
