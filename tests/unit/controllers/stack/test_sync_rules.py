"""`sync`: when a Stack needs an update and what its status says about the last one (pko-v2 §3.1 steps 3, 7-9)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from pko.api import names
from pko.api import stack as stack_api
from pko.api import update as up_api
from pko.api.meta import Condition
from pko.controllers.stack import sync

NOW = datetime.datetime(2025, 3, 1, 12, 0, 0, tzinfo=datetime.UTC)


def _ago(seconds: float) -> str:
    return (NOW - datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _last(state: str = "succeeded", *, generation: int = 1, request: str | None = None, commit: str = "c1",
          attempted: str | None = None, failures: int = 0, type_: str = "up", ago: float = 5.0,
          name: str = "s-1") -> dict[str, Any]:
    last: dict[str, Any] = {"generation": generation, "name": name, "type": type_, "state": state,
                            "lastAttemptedCommit": attempted or commit, "lastResyncTime": _ago(ago),
                            "failures": failures}
    if state == "succeeded":
        last["lastSuccessfulCommit"] = commit
    if request is not None:
        last["reconcileRequest"] = request
    return last


def _stack(*, last: dict[str, Any] | None = None, generation: int = 1, request: str | None = None,
           deleting: bool = False, name: str = "s", **spec: Any) -> stack_api.Stack:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "generation": generation, "uid": "u-1"}
    if request is not None:
        meta["annotations"] = {names.ANNOTATION_RECONCILE_REQUEST: request}
    if deleting:
        meta["deletionTimestamp"] = _ago(1)
        meta["finalizers"] = [names.FINALIZER]
    body: dict[str, Any] = {"apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": meta,
                            "spec": {"stack": "dev", **spec}}
    if last is not None:
        body["status"] = {"lastUpdate": last}
    return stack_api.Stack.model_validate(body)


def _synced(stack: stack_api.Stack, commit: str = "c1") -> tuple[bool, str]:
    return sync.is_synced(stack, commit, NOW)


# --- is_synced ---------------------------------------------------------------------------------------------------

def test_a_stack_that_never_ran_needs_its_initial_update() -> None:
    assert _synced(_stack()) == (False, "Initial stack update")


def test_a_new_generation_needs_an_update() -> None:
    assert _synced(_stack(last=_last(generation=1), generation=2)) == (False, "New stack generation: 2")


def test_a_new_generation_while_deleting_is_reported_as_deletion() -> None:
    stack = _stack(last=_last(generation=1), generation=2, deleting=True)
    assert _synced(stack) == (False, "Stack marked for deletion")


@pytest.mark.parametrize(("annotation", "recorded", "message"), [
    ("now", None, 'Sync request: "now"'),
    ("again", "now", 'Sync request: "again"'),
    (None, "now", 'Sync request: ""'),
    ('with "quotes"', None, 'Sync request: "with \\"quotes\\""'),
])
def test_a_new_reconcile_request_needs_an_update(annotation: str | None, recorded: str | None,
                                                 message: str) -> None:
    assert _synced(_stack(last=_last(request=recorded), request=annotation)) == (False, message)


def test_the_same_reconcile_request_is_synced() -> None:
    assert _synced(_stack(last=_last(request="now"), request="now")) == (True, "")


def test_succeeded_up_while_deleting_needs_the_destroy() -> None:
    assert _synced(_stack(last=_last(type_="up"), deleting=True)) == (False, "Stack marked for deletion")


def test_succeeded_destroy_while_deleting_is_synced() -> None:
    assert _synced(_stack(last=_last(type_="destroy"), deleting=True)) == (True, "")


def test_a_new_commit_after_a_success_needs_an_update() -> None:
    assert _synced(_stack(last=_last(commit="c1")), commit="c2") == (False, 'New commit detected: "c2"')


def test_a_success_on_the_same_commit_is_synced_without_resync() -> None:
    assert _synced(_stack(last=_last(ago=10 * 86400))) == (True, "")


@pytest.mark.parametrize(("frequency", "ago", "expected"), [
    (None, 59, (True, "")),
    (None, 60, (False, "Resync time elapsed: 1m0s")),
    (30, 60, (False, "Resync time elapsed: 1m0s")),  # below the 60s minimum
    (30, 45, (True, "")),
    (120, 100, (True, "")),
    (120, 121, (False, "Resync time elapsed: 2m0s")),
])
def test_continue_resync_runs_again_once_the_frequency_elapsed(frequency: int | None, ago: float,
                                                               expected: tuple[bool, str]) -> None:
    spec: dict[str, Any] = {"continueResyncOnCommitMatch": True}
    if frequency is not None:
        spec["resyncFrequencySeconds"] = frequency
    assert _synced(_stack(last=_last(ago=ago), **spec)) == expected


def test_a_new_commit_after_a_failure_needs_an_update_at_once() -> None:
    last = _last("failed", attempted="c1", failures=1, ago=0)
    assert _synced(_stack(last=last), commit="c2") == (False, 'New commit detected: "c2"')


def test_a_new_commit_after_three_failures_still_needs_an_update() -> None:
    last = _last("failed", attempted="c1", failures=3, ago=0)
    assert _synced(_stack(last=last), commit="c2") == (False, 'New commit detected: "c2"')


@pytest.mark.parametrize(("failures", "ago", "expected"), [
    (0, 9, (True, "")),
    (0, 10, (False, "Backoff time elapsed: 10s")),
    (1, 29, (True, "")),
    (1, 30, (False, "Backoff time elapsed: 30s")),
    (2, 90, (False, "Backoff time elapsed: 1m30s")),
])
def test_a_failure_is_retried_after_its_cooldown(failures: int, ago: float, expected: tuple[bool, str]) -> None:
    assert _synced(_stack(last=_last("failed", failures=failures, ago=ago))) == expected


def test_the_backoff_cap_shortens_the_cooldown() -> None:
    stack = _stack(last=_last("failed", failures=2, ago=5), retryMaxBackoffDurationSeconds=5)
    assert _synced(stack) == (False, "Backoff time elapsed: 5s")


@pytest.mark.parametrize("failures", [3, 4, 10])
def test_three_failures_count_as_synced_however_long_ago(failures: int) -> None:
    assert _synced(_stack(last=_last("failed", failures=failures, ago=10 * 86400))) == (True, "")


def test_a_failed_destroy_while_deleting_is_retried_after_its_cooldown() -> None:
    stack = _stack(last=_last("failed", type_="destroy", failures=0, ago=10), deleting=True)
    assert _synced(stack) == (False, "Backoff time elapsed: 10s")


def test_an_unknown_state_triggers_nothing() -> None:
    assert _synced(_stack(last=_last("weird"))) == (True, "")


# --- cooldown ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("failures", "seconds"), [
    (0, 10), (1, 30), (2, 90), (3, 270), (4, 810), (7, 21870), (8, 65610), (9, 86400), (30, 86400),
])
def test_cooldown_is_ten_seconds_tripled_per_failure_capped_at_a_day(failures: int, seconds: float) -> None:
    stack = _stack(last=_last("failed", failures=failures))
    assert sync.cooldown(stack_api.spec_of(stack), stack.status.last_update) == seconds  # type: ignore[union-attr]


@pytest.mark.parametrize(("cap", "failures", "seconds"), [
    (2, 0, 2), (20, 0, 10), (20, 1, 20), (3600, 5, 2430), (3600, 6, 3600), (0, 9, 86400),
    (172800, 9, 172800), (172800, 8, 65610),
])
def test_cooldown_cap_is_the_stacks_retry_max_backoff(cap: int, failures: int, seconds: float) -> None:
    stack = _stack(last=_last("failed", failures=failures), retryMaxBackoffDurationSeconds=cap)
    assert sync.cooldown(stack_api.spec_of(stack), stack.status.last_update) == seconds  # type: ignore[union-attr]


def test_cooldown_is_zero_without_a_failure() -> None:
    spec = stack_api.spec_of(_stack())
    assert sync.cooldown(spec, None) == 0
    succeeded = _stack(last=_last("succeeded"))
    assert sync.cooldown(spec, succeeded.status.last_update) == 0  # type: ignore[union-attr]


# --- mark_result -------------------------------------------------------------------------------------------------

def _conditions(found: list[Condition]) -> dict[str, tuple[str, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in found}


def _state(state: str, failures: int = 0, type_: str = "up") -> stack_api.StackUpdateState:
    return stack_api.StackUpdateState.model_validate(_last(state, failures=failures, type_=type_))


def test_mark_result_success_is_ready() -> None:
    assert _conditions(sync.mark_result(None, _state("succeeded"), NOW)) == {
        "Ready": ("True", "ProcessingCompleted", "the stack has been processed and is up to date")}


@pytest.mark.parametrize("failures", [0, 1, 2])
def test_mark_result_failure_below_the_limit_is_retrying(failures: int) -> None:
    assert _conditions(sync.mark_result(None, _state("failed", failures), NOW)) == {
        "Ready": ("False", "NotReadyInProgress", "reconciliation is in progress"),
        "Reconciling": ("True", "RetryingAfterFailure", f"{failures} update failure(s)"),
    }


@pytest.mark.parametrize(("failures", "type_"), [(3, "up"), (5, "up"), (3, "destroy"), (3, "preview")])
def test_mark_result_three_failures_stall(failures: int, type_: str) -> None:
    assert _conditions(sync.mark_result(None, _state("failed", failures, type_), NOW)) == {
        "Ready": ("False", "NotReadyStalled", "reconciliation is stalled"),
        "Stalled": ("True", "UpdateFailed",
                    f"{type_} failed {failures} times; not retrying until the spec or source changes"),
    }


def test_mark_result_failed_preview_is_preview_failed() -> None:
    assert _conditions(sync.mark_result(None, _state("failed", 1, "preview"), NOW)) == {
        "Ready": ("False", "NotReadyInProgress", "reconciliation is in progress"),
        "Reconciling": ("True", "PreviewFailed", "preview failed (1 attempt(s))"),
    }


def test_mark_result_replaces_earlier_conditions() -> None:
    stalled = sync.mark_result(None, _state("failed", 3), NOW)
    assert set(_conditions(sync.mark_result(stalled, _state("failed", 1), NOW))) == {"Ready", "Reconciling"}
    assert set(_conditions(sync.mark_result(stalled, _state("succeeded"), NOW))) == {"Ready"}


# --- record_failure / record_success -----------------------------------------------------------------------------

def _current(generation: int = 1, request: str | None = None, commit: str = "c2") -> stack_api.CurrentStackUpdate:
    return stack_api.CurrentStackUpdate(generation=generation, reconcile_request=request, name="s-2", commit=commit)


def _update(type_: str = "up", message: str | None = "boom", permalink: str | None = None) -> up_api.Update:
    status: dict[str, Any] = {}
    if message is not None:
        status["message"] = message
    if permalink is not None:
        status["permalink"] = permalink
    return up_api.Update.model_validate({
        "metadata": {"name": "s-2", "namespace": "ns", "generation": 1},
        "spec": {"workspaceName": "s", "stackName": "dev", "type": type_}, "status": status})


def test_first_failure_counts_zero_and_keeps_no_successful_commit() -> None:
    last = sync.record_failure(_current(), _update(), None, NOW)
    # a zero count is left out, as the Go operator's `omitempty` does (compared in tests/interop)
    assert last.model_dump(by_alias=True, exclude_none=True) == {
        "generation": 1, "name": "s-2", "type": "up", "state": "failed", "message": "boom",
        "lastAttemptedCommit": "c2", "lastResyncTime": "2025-03-01T12:00:00Z",
    }


def test_failure_after_a_success_with_the_same_inputs_counts_up_and_keeps_the_successful_commit() -> None:
    previous = _state("succeeded")  # generation 1, no request, commit c1
    last = sync.record_failure(_current(), _update(permalink="https://app/x"), previous, NOW)
    assert last.failures == 1
    assert last.last_successful_commit == "c1"
    assert last.last_attempted_commit == "c2"
    assert last.permalink == "https://app/x"


@pytest.mark.parametrize("failures", [0, 1, 2, 3])
def test_repeated_failures_with_the_same_inputs_count_up(failures: int) -> None:
    previous = _state("failed", failures)
    assert sync.record_failure(_current(), _update(), previous, NOW).failures == failures + 1


@pytest.mark.parametrize(("generation", "sync_request"), [(2, None), (1, "please"), (2, "please")])
def test_failures_restart_from_zero_when_generation_or_request_changed(generation: int,
                                                                       sync_request: str | None) -> None:
    previous = _state("failed", 2)
    last = sync.record_failure(_current(generation, sync_request), _update(), previous, NOW)
    assert not last.failures
    assert last.generation == generation
    assert last.reconcile_request == sync_request


def test_failure_of_a_destroy_records_its_type() -> None:
    assert sync.record_failure(_current(), _update("destroy"), None, NOW).type == "destroy"


def test_success_records_the_commit_as_attempted_and_successful_and_resets_failures() -> None:
    last = sync.record_success(_current(request="r"), _update(message=None, permalink="p"), NOW)
    assert last.model_dump(by_alias=True, exclude_none=True) == {
        "generation": 1, "reconcileRequest": "r", "name": "s-2", "type": "up", "state": "succeeded",
        "lastAttemptedCommit": "c2", "lastSuccessfulCommit": "c2", "permalink": "p",
        "lastResyncTime": "2025-03-01T12:00:00Z",
    }


def test_masked_outputs_hide_secret_values() -> None:
    data = {"b": b'{"x": [1]}', "a": b'"plain"', "token": b'"s3cr3t"'}
    assert sync.masked_outputs(data, ["token"]) == {"a": "plain", "b": {"x": [1]}, "token": "[secret]"}
    assert list(sync.masked_outputs(data, [])) == ["a", "b", "token"]


# --- requeue_after -----------------------------------------------------------------------------------------------

def _requeue(stack: stack_api.Stack) -> float | None:
    return sync.requeue_after(stack, NOW)


def test_requeue_nothing_before_any_update() -> None:
    assert _requeue(_stack()) is None


def test_requeue_nothing_for_a_success_without_resync_or_branch() -> None:
    assert _requeue(_stack(last=_last())) is None


def test_requeue_a_failure_when_its_cooldown_ends() -> None:
    assert _requeue(_stack(last=_last("failed", failures=1, ago=10))) == 20
    assert _requeue(_stack(last=_last("failed", failures=0, ago=60))) == 1.0  # overdue: soon, not never


def test_requeue_nothing_after_three_failures_without_a_branch() -> None:
    assert _requeue(_stack(last=_last("failed", failures=3))) is None


def test_requeue_a_resync_when_the_frequency_ends() -> None:
    assert _requeue(_stack(last=_last(ago=15), continueResyncOnCommitMatch=True)) == 45
    assert _requeue(_stack(last=_last(ago=15), continueResyncOnCommitMatch=True, resyncFrequencySeconds=300)) == 285


def test_requeue_a_branch_for_its_poll() -> None:
    branch = {"projectRepo": "https://git/x", "branch": "main"}
    assert _requeue(_stack(last=_last(), **branch)) == 60
    assert _requeue(_stack(last=_last(), resyncFrequencySeconds=90, **branch)) == 90
    assert _requeue(_stack(last=_last("failed", failures=3), **branch)) == 60  # a stalled branch is still polled
    assert _requeue(_stack(last=_last("failed", failures=0, ago=5), **branch)) == 5  # the earlier of the two
    assert _requeue(_stack(last=_last("failed", failures=4, ago=5), retryMaxBackoffDurationSeconds=1000,
                           **branch)) == 60


def test_a_branch_is_polled_even_before_its_first_update() -> None:
    """A Stack whose workspace never became ready (an install that fails) has no update yet; its branch's next
    commit may be the fix, so it is still polled — a pin, a Program or a Flux source is not."""
    assert sync.branch_poll(stack_api.spec_of(_stack(projectRepo="https://git/x", branch="main"))) == 60
    assert sync.branch_poll(stack_api.spec_of(_stack(projectRepo="https://git/x", branch="main",
                                                     resyncFrequencySeconds=120))) == 120
    assert sync.branch_poll(stack_api.spec_of(_stack(projectRepo="https://git/x", commit="c1"))) is None
    assert sync.branch_poll(stack_api.spec_of(_stack())) is None


def test_requeue_nothing_for_a_commit_pin() -> None:
    assert _requeue(_stack(last=_last(), projectRepo="https://git/x", commit="c1")) is None


# --- prerequisite_problem ----------------------------------------------------------------------------------------

def _requirement(within: str | None) -> stack_api.RequirementSpec | None:
    if within is None:
        return None
    return stack_api.RequirementSpec.model_validate({"succeededWithinDuration": within})


def test_prerequisite_that_never_ran_is_not_satisfied() -> None:
    problem = sync.prerequisite_problem(None, _stack(name="a"), NOW)
    assert problem == sync.Unsatisfied("prerequisite has not run to completion")


@pytest.mark.parametrize("other", [
    _stack(name="a", last=_last(generation=1), generation=2),
    _stack(name="a", last=_last(request=None), request="new"),
    _stack(name="a", last=_last(request="old"), request="new"),
])
def test_prerequisite_with_pending_changes_has_not_run(other: stack_api.Stack) -> None:
    assert sync.prerequisite_problem(None, other, NOW) == sync.Unsatisfied("prerequisite has not run to completion")


def test_failed_prerequisite_is_not_satisfied() -> None:
    other = _stack(name="a", last=_last("failed", failures=1))
    assert sync.prerequisite_problem(_requirement("1h"), other, NOW) == sync.Unsatisfied("prerequisite failed")


@pytest.mark.parametrize(("within", "ago"), [(None, 10 * 86400), ("1h", 3599), ("1m", 60), ("5s", 0)])
def test_recent_enough_success_satisfies(within: str | None, ago: float) -> None:
    other = _stack(name="a", last=_last(ago=ago, request="r"), request="r")
    assert sync.prerequisite_problem(_requirement(within), other, NOW) is None


@pytest.mark.parametrize(("within", "ago"), [("1h", 3601), ("1m", 61), ("1m30s", 91)])
def test_old_success_is_out_of_date_and_names_the_update_to_request_after(within: str, ago: float) -> None:
    other = _stack(name="a", last=_last(ago=ago, name="a-18f"))
    assert sync.prerequisite_problem(_requirement(within), other, NOW) == sync.Unsatisfied(
        "prerequisite is out of date", "a-18f")


def test_an_empty_reconcile_request_is_left_out_of_last_update() -> None:
    """As the Go operator's `omitempty` does: a Stack written by one operator reads the same under the other."""
    for last in (sync.record_success(_current(request=""), _update(), NOW),
                 sync.record_failure(_current(request=""), _update(), None, NOW)):
        assert "reconcileRequest" not in last.model_dump(by_alias=True, exclude_none=True)


@pytest.mark.parametrize("changes", [{}, None])
def test_an_update_without_changes_leaves_resource_changes_out_of_last_update(changes: dict[str, int] | None) -> None:
    """Never `{}`: server-side apply of an empty map over one this manager filled before leaves `null`, which the
    schema refuses — a failed destroy after an up with changes then made every status write of the Stack fail."""
    update = up_api.Update.model_validate({
        "metadata": {"name": "u", "namespace": "ns"}, "spec": {"type": "destroy"},
        "status": {"message": "failed", **({"resourceChanges": changes} if changes is not None else {})}})
    current = stack_api.CurrentStackUpdate(generation=2, name="u", commit="")
    now = datetime.datetime(2026, 11, 22, tzinfo=datetime.UTC)
    for recorded in (sync.record_failure(current, update, None, now), sync.record_success(current, update, now)):
        assert recorded.resource_changes is None
        assert "resourceChanges" not in recorded.model_dump(by_alias=True, exclude_none=True, mode="json")
    update.status.resource_changes = {"delete": 1}  # type: ignore[union-attr]
    assert sync.record_failure(current, update, None, now).resource_changes == {"delete": 1}


def test_a_waiting_updates_workspace_is_refreshed_only_before_it_starts() -> None:
    """A current Update whose Workspace an earlier operator wrote (and cannot get ready) gets its Workspace
    re-applied, but never under a running operation, for a newer generation, a Ready Workspace, or a deletion."""
    base = {"started": False, "stack_generation": 2, "update_generation": 2, "deleting": False,
            "workspace_ready": False}
    assert sync.refresh_stuck_workspace(**base)  # type: ignore[arg-type]
    for change in ({"started": True}, {"stack_generation": 3}, {"workspace_ready": True}, {"deleting": True},
                   {"stack_generation": None}):
        assert not sync.refresh_stuck_workspace(**{**base, **change})  # type: ignore[arg-type]


def _named(stack: str, seconds_ago: float) -> str:
    return names.update_name(stack, int((NOW.timestamp() - seconds_ago) * 1000))


def test_a_missing_current_update_is_given_up_only_after_the_grace() -> None:
    assert sync.lost_update_wait("app", _named("app", 5), NOW, grace=30) == pytest.approx(25)
    assert sync.lost_update_wait("app", _named("app", 30), NOW, grace=30) == 0
    assert sync.lost_update_wait("app", _named("app", 3600), NOW, grace=30) == 0


def test_a_missing_current_update_of_another_shape_is_given_up_at_once() -> None:
    assert sync.lost_update_wait("app", "app-not-hex", NOW) == 0
    assert sync.lost_update_wait("app", _named("other", 1), NOW) == 0
    assert sync.lost_update_wait("app", "app-", NOW) == 0
