"""The roads one pass of the Stack reconciler takes (pko.controllers.stack.steps): pure, so each is pinned here
without an API server; the e2e tier runs them against a real one."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from pko.api import conditions, names
from pko.api import stack as stack_api
from pko.api import workspace as ws_api
from pko.api.meta import Condition
from pko.controllers.stack import drift, steps, sync

NOW = datetime.datetime(2026, 11, 22, 12, 0, tzinfo=datetime.UTC)
UPDATED = "2026-11-22T11:40:00Z"  # the last successful update, at commit c1


def _last(state: str = "succeeded") -> dict[str, Any]:
    last: dict[str, Any] = {"generation": 1, "name": "s-1", "type": "up", "state": state,
                            "lastAttemptedCommit": "c1", "lastResyncTime": UPDATED, "failures": 0}
    if state == "succeeded":
        last["lastSuccessfulCommit"] = "c1"
    return last


def _stack(*, status: dict[str, Any] | None = None, deleting: bool = False, **spec: Any) -> stack_api.Stack:
    meta: dict[str, Any] = {"name": "s", "namespace": "ns", "generation": 1, "uid": "u-1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-22T11:59:00Z"
        meta["finalizers"] = [names.FINALIZER]
    return stack_api.Stack.model_validate({"apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": meta,
                                           "spec": {"stack": "dev", **spec}, "status": status})


def _condition(type_: str, status: str, reason: str, message: str = "") -> Condition:
    return Condition.model_validate({"type": type_, "status": status, "reason": reason, "message": message,
                                     "lastTransitionTime": UPDATED})


def _entry(stack: stack_api.Stack, found: list[Condition] | None = None) -> steps.Entry:
    return steps.entry(stack, stack.status or stack_api.StackStatus(), found or [])


# --- the objects a pass reads ---------------------------------------------------------------------------------

def test_a_stack_status_is_unchanged_only_when_every_field_matches() -> None:
    ready = {"type": "Ready", "status": "True", "reason": "ProcessingCompleted", "message": "",
             "lastTransitionTime": "2026-11-22T20:00:00Z", "observedGeneration": 2}
    stack = _stack(status={"observedGeneration": 2, "observedReconcileRequest": "", "conditions": [ready],
                           "lastUpdate": _last()})
    assert stack.status is not None
    body = steps.status_body(stack.status)
    assert steps.status_unchanged(stack, body)
    assert not steps.status_unchanged(stack, {**body, "observedGeneration": 3})
    assert not steps.status_unchanged(stack, {k: v for k, v in body.items() if k != "lastUpdate"})
    assert not steps.status_unchanged(stack.model_copy(update={"status": None}), body)


def test_the_status_body_always_carries_both_observed_fields_as_the_reference_does() -> None:
    body = steps.status_body(stack_api.StackStatus())
    assert body == {"observedGeneration": 0, "observedReconcileRequest": ""}


def test_while_the_workspace_is_applied_a_queue_place_or_a_workspace_problem_stays_shown() -> None:
    plain = (conditions.RECONCILING_PROCESSING, conditions.MESSAGE_WAITING_FOR_WORKSPACE)
    assert steps.waiting_shown([]) == plain
    queued = _condition(conditions.RECONCILING, "True", conditions.QUEUED, "queued: 4th of 9")
    assert steps.waiting_shown([queued]) == (conditions.QUEUED, "queued: 4th of 9")
    problem = f"{conditions.MESSAGE_WAITING_FOR_WORKSPACE}: image pull failed"
    shown = _condition(conditions.RECONCILING, "True", conditions.RECONCILING_PROCESSING, problem)
    assert steps.waiting_shown([shown]) == (conditions.RECONCILING_PROCESSING, problem)
    other = _condition(conditions.RECONCILING, "True", conditions.RECONCILING_PROCESSING, "something else")
    assert steps.waiting_shown([other]) == plain


# --- 1. once a finished Update is absorbed --------------------------------------------------------------------

def test_a_deleting_stack_that_destroys_nothing_is_released() -> None:
    assert _entry(_stack(deleting=True)).begin == steps.Begin.RELEASE
    preview = _stack(deleting=True, destroyOnFinalize=True, preview=True)
    assert _entry(preview).begin == steps.Begin.RELEASE  # a preview Stack never destroys


def test_a_destroy_reads_its_project_from_status_unless_it_runs_the_program() -> None:
    info = {"name": "p", "runtime": "yaml"}
    known = _stack(deleting=True, destroyOnFinalize=True, status={"lastUpdate": _last(), "projectInfo": info})
    assert _entry(known).begin == steps.Begin.FROM_STATUS
    runs = _stack(deleting=True, destroyOnFinalize=True, runProgram=True,
                  status={"lastUpdate": _last(), "projectInfo": info})
    assert _entry(runs).begin == steps.Begin.RESOLVE
    unknown = _stack(deleting=True, destroyOnFinalize=True, status={"lastUpdate": _last()})
    assert _entry(unknown).begin == steps.Begin.RESOLVE


def test_suspension_stops_a_pass_but_never_a_deletion() -> None:
    assert _entry(_stack(suspend=True)).begin == steps.Begin.SUSPEND
    assert _entry(_stack(suspend=True, deleting=True, destroyOnFinalize=True)).begin == steps.Begin.RESOLVE
    assert _entry(_stack(suspend=True, deleting=True)).begin == steps.Begin.RELEASE


def test_resuming_is_said_once_when_the_stack_showed_suspended() -> None:
    shown = [_condition(conditions.RECONCILING, "False", conditions.RECONCILING_SUSPENDED)]
    assert _entry(_stack(), shown) == steps.Entry(steps.Begin.RESOLVE, resumed=True)
    assert _entry(_stack(suspend=True), shown) == steps.Entry(steps.Begin.SUSPEND)  # still suspended
    assert _entry(_stack()) == steps.Entry(steps.Begin.RESOLVE)


def test_config_that_is_not_an_object_is_invalid_before_any_fetch() -> None:
    assert _entry(_stack(config=["a", "b"])).begin == steps.Begin.INVALID
    assert _entry(_stack(config={"a": "b"})).begin == steps.Begin.RESOLVE


def test_removing_drift_detection_forgets_what_it_added_on_every_road() -> None:
    drifted = [_condition(conditions.DRIFTED, "True", "DriftDetected")]
    assert _entry(_stack(), drifted).forget_drift
    assert _entry(_stack(deleting=True), drifted).forget_drift
    assert _entry(_stack(status={"drift": {"changes": {"update": 1}}})).forget_drift
    assert not _entry(_stack(driftDetection={"interval": "30m"}), drifted).forget_drift
    assert not _entry(_stack()).forget_drift


# --- 2. once the source and its Workspace are known -----------------------------------------------------------

def _due(stack: stack_api.Stack, commit: str = "c1", found: list[Condition] | None = None,
         now: datetime.datetime = NOW) -> steps.Due:
    return steps.due(stack, found or [], commit, now, defaults=sync.DEFAULT_POLICY, min_resync=sync.MIN_RESYNC,
                     output_refs=None)


def test_an_update_is_due_with_the_reason_the_event_and_the_update_carry() -> None:
    assert _due(_stack()) == steps.Due(steps.Next.UPDATE, "Initial stack update")
    moved = _due(_stack(status={"lastUpdate": _last()}), commit="c2")
    assert moved.next == steps.Next.UPDATE
    assert moved.message == sync.is_synced(_stack(status={"lastUpdate": _last()}), "c2", NOW)[1]


def test_a_synced_stack_runs_nothing_and_carries_its_drift_schedule() -> None:
    synced = _due(_stack(status={"lastUpdate": _last()}))
    assert synced == steps.Due(steps.Next.SYNCED, synced.message)
    watched = _stack(driftDetection={"interval": "30m"}, status={"lastUpdate": _last()})
    assert _due(watched) == steps.Due(steps.Next.SYNCED, synced.message, schedule=drift.Plan(wait=10 * 60))
    later = _due(watched, now=NOW + datetime.timedelta(minutes=10))
    assert later.next == steps.Next.CHECK
    assert later.schedule.due
    bad = _stack(driftDetection={"schedule": "not a schedule"}, status={"lastUpdate": _last()})
    assert _due(bad).next == steps.Next.SYNCED
    assert _due(bad).schedule.problem


def test_drift_that_asks_to_be_remediated_is_an_update_even_when_synced() -> None:
    stack = _stack(driftDetection={"interval": "30m", "remediate": True},
                   status={"lastUpdate": _last(), "drift": {"changes": {"update": 2}}})
    found = drift.mark(conditions.mark_ready(None, now=NOW),
                       drift.Finding("True", "DriftDetected", "2 resource(s) drifted"), NOW)
    message = "Drift detected: 2 resource(s) drifted; remediating"
    assert _due(stack, found=found) == steps.Due(steps.Next.UPDATE, message, message)
    # a new commit is the reason given, and the update still remediates
    assert _due(stack, commit="c2", found=found).remediation == message
    assert _due(stack, commit="c2", found=found).message != message


# --- 3. once the Workspace is applied -------------------------------------------------------------------------

def _workspace(*found: Condition, observed: int = 1, deleting: bool = False) -> ws_api.Workspace:
    meta: dict[str, Any] = {"name": "s", "namespace": "ns", "generation": 1}
    if deleting:
        meta["deletionTimestamp"] = UPDATED
    return ws_api.Workspace.model_validate({
        "metadata": meta, "spec": {},
        "status": {"observedGeneration": observed, "conditions": [c.model_dump(by_alias=True) for c in found]}})


READY = _condition(conditions.READY, "True", "Ready")
NOT_READY = _condition(conditions.READY, "False", "Waiting")


def _stalled(reason: str) -> Condition:
    return _condition(conditions.STALLED, "True", reason, "it broke")


def test_a_ready_workspace_of_this_generation_starts_the_operation() -> None:
    assert steps.placed(_workspace(READY), check=False, deleting=False, ever_updated=True).then == steps.Then.START
    assert steps.placed(_workspace(READY, observed=0), check=False, deleting=False,
                        ever_updated=True).then == steps.Then.WAIT  # not yet observed: not ready
    assert steps.placed(_workspace(READY, deleting=True), check=False, deleting=False,
                        ever_updated=True).then == steps.Then.WAIT


def test_a_workspace_on_its_way_is_waited_for_with_its_problem_shown_except_for_a_check() -> None:
    waiting = _workspace(NOT_READY)
    assert steps.placed(waiting, check=False, deleting=False, ever_updated=True) == steps.Placed(
        steps.Then.WAIT, show_problem=True)
    assert steps.placed(waiting, check=True, deleting=False, ever_updated=True) == steps.Placed(steps.Then.WAIT)
    settled = _workspace(NOT_READY, _condition(conditions.STALLED, "False", "Fine"))
    assert steps.placed(settled, check=False, deleting=False, ever_updated=True).then == steps.Then.WAIT


@pytest.mark.parametrize(("said", "reason"), [
    ("IncompatibleConfiguration", conditions.STALLED_PULUMI_VERSION_TOO_LOW),
    ("InitializationFailed", conditions.STALLED_WORKSPACE_FAILED),
])
def test_a_failed_workspace_stalls_the_stack_with_the_references_reason(said: str, reason: str) -> None:
    failed = _workspace(NOT_READY, _stalled(said))
    assert steps.placed(failed, check=False, deleting=False, ever_updated=True) == steps.Placed(
        steps.Then.STALL, reason, f"{said}: it broke")
    assert steps.placed(failed, check=False, deleting=True, ever_updated=True).then == steps.Then.STALL


def test_a_failed_workspace_ends_a_drift_check_and_releases_a_stack_that_never_ran() -> None:
    failed = _workspace(NOT_READY, _stalled("InitializationFailed"))
    assert steps.placed(failed, check=True, deleting=False, ever_updated=True) == steps.Placed(
        steps.Then.CHECK_FAILED, message="the workspace failed: InitializationFailed: it broke")
    assert steps.placed(failed, check=False, deleting=True, ever_updated=False) == steps.Placed(steps.Then.RELEASE)
