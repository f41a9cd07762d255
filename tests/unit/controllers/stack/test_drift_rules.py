"""Drift checks as pure rules (state in, decision out): a check starts only when nothing else is due; its result
becomes `Drifted` and `status.drift` without touching `lastUpdate`; events on news only; remediation runs one
refreshing update; a Stack without `driftDetection` is left exactly as the Go operator leaves it."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from pko.api import conditions
from pko.api import drift as drift_api
from pko.api import stack as stack_api
from pko.api import update as up_api
from pko.api import workspace as ws_api
from pko.controllers.stack import drift

NOW = datetime.datetime(2026, 11, 22, 12, 0, tzinfo=datetime.UTC)
UPDATED = "2026-11-22T11:40:00Z"  # the last successful update
URN_A = "urn:pulumi:dev::p::t::a"
URN_B = "urn:pulumi:dev::p::t::b"


def _stack(detection: dict[str, Any] | None = {"interval": "30m"}, *, state: str = "succeeded",  # noqa: B006
           status: dict[str, Any] | None = None, **spec: Any) -> stack_api.Stack:
    body: dict[str, Any] = {"stack": "dev", **spec}
    if detection is not None:
        body["driftDetection"] = detection
    full = {"lastUpdate": {"generation": 1, "name": "s-1", "type": "up", "state": state,
                           "lastResyncTime": UPDATED}, **(status or {})}
    return stack_api.Stack.model_validate({"metadata": {"name": "s", "namespace": "n", "uid": "u-1", "generation": 1},
                                           "spec": body, "status": full})


def _check_update(*, failed: bool = False, drift_result: dict[str, Any] | None = None,
                  message: str = "") -> up_api.Update:
    status: dict[str, Any] = {
        "observedGeneration": 1, "message": message, "endTime": "2026-11-22T12:00:07Z",
        "conditions": [{"type": "Complete", "status": "True", "reason": "Updated", "message": "",
                        "lastTransitionTime": "2026-11-22T12:00:07Z"},
                       {"type": "Failed", "status": "True" if failed else "False", "reason": "x", "message": "",
                        "lastTransitionTime": "2026-11-22T12:00:07Z"}]}
    if drift_result is not None:
        status["drift"] = drift_result
    return up_api.Update.model_validate({
        "metadata": {"name": "s-check", "namespace": "n", "generation": 1,
                     "creationTimestamp": "2026-11-22T12:00:00Z", "labels": {up_api.LABEL_DRIFT_CHECK: "true"}},
        "spec": {"type": "preview", "refresh": True}, "status": status})


def test_no_plan_without_drift_detection_or_when_something_else_holds_the_stack() -> None:
    assert drift.plan(_stack(None), NOW) == drift.Plan()
    assert drift.plan(_stack(suspend=True), NOW) == drift.Plan()
    assert drift.plan(_stack(state="failed"), NOW) == drift.Plan()  # a failing Stack has its retries
    assert drift.plan(_stack(status={"currentUpdate": {"name": "s-2"}}), NOW) == drift.Plan()
    assert drift.plan(_stack(status={"drift": {"currentCheck": "s-c"}}), NOW) == drift.Plan()
    deleting = _stack()
    deleting.metadata.deletion_timestamp = "2026-11-22T11:59:00Z"
    assert drift.plan(deleting, NOW) == drift.Plan()


def test_the_first_check_is_an_interval_after_the_last_update_then_after_each_check() -> None:
    assert drift.plan(_stack(), NOW) == drift.Plan(due=False, wait=10 * 60)
    assert drift.plan(_stack(), NOW + datetime.timedelta(minutes=10)).due
    checked = _stack(status={"drift": {"lastCheck": {"name": "c", "startTime": "2026-11-22T11:50:00Z",
                                                     "result": "failed"}}})
    assert drift.plan(checked, NOW) == drift.Plan(due=False, wait=20 * 60)  # a failed check waits its turn too


def test_a_schedule_that_cannot_run_is_a_precise_unknown_condition_and_goes_when_fixed() -> None:
    plan = drift.plan(_stack({"cron": "0 0 31 2 *"}), NOW)
    assert not plan.due
    assert plan.wait is None
    assert plan.problem == "spec.driftDetection.cron: '0 0 31 2 *' never fires (failed to find next date)"
    found = drift.mark_schedule(conditions.mark_ready(None, now=NOW), plan.problem, NOW)
    drifted = conditions.find(found, conditions.DRIFTED)
    assert drifted is not None
    assert (drifted.status, drifted.reason, drifted.message) == ("Unknown", "InvalidSchedule", plan.problem)
    assert drift.shows_problem(found)
    assert conditions.is_true(found, conditions.READY)  # updates go on
    assert conditions.find(drift.mark_schedule(found, None, NOW), conditions.DRIFTED) is None


def test_the_check_update_is_a_labelled_preview_with_refresh_of_the_stacks_update() -> None:
    stack = _stack(targets=["urn:x"], updateTemplate={"spec": {"parallel": 3}})
    workspace = ws_api.Workspace.model_validate({"metadata": {"name": "s", "namespace": "n", "uid": "w-1"}})
    update = drift.check_update(stack, workspace, 0x18C)
    assert update["metadata"]["name"] == "s-18c"
    assert update["metadata"]["labels"] == {"pulumi.com/component": "stack", "pulumi.com/stack-name": "s",
                                            up_api.LABEL_DRIFT_CHECK: "true"}
    spec = update["spec"]
    assert (spec["type"], spec["refresh"], spec["message"], spec["target"], spec["parallel"]) == (
        "preview", True, "Drift check", ["urn:x"], 3)
    assert {r["kind"] for r in update["metadata"]["ownerReferences"]} == {"Stack", "Workspace"}


def test_drift_found_is_listed_on_the_stack_and_lastupdate_is_untouched() -> None:
    stack = _stack()
    status = stack.status
    assert status is not None
    before = status.last_update
    drift.started(status, "s-check")
    assert drift.in_flight(status) == "s-check"
    result = {"resources": [{"urn": URN_A, "op": "update"}, {"urn": URN_B, "op": "delete"}],
              "changes": {"update": 1, "delete": 1}}
    finding = drift.absorb(status, _check_update(drift_result=result), "s-check", NOW)
    assert finding == drift.Finding("True", "DriftDetected",
                                    f"2 resource(s) drifted: {URN_A} (update), {URN_B} (delete)")
    assert status.last_update == before
    assert status.drift is not None
    assert status.drift.current_check is None
    assert status.drift.last_check == drift_api.DriftCheck(name="s-check", start_time="2026-11-22T12:00:00Z",
                                                           end_time="2026-11-22T12:00:07Z", result="succeeded")
    assert [r.urn for r in status.drift.resources or []] == [URN_A, URN_B]
    assert status.drift.changes == {"update": 1, "delete": 1}


def test_the_message_lists_a_bounded_number_of_urns() -> None:
    status = stack_api.StackStatus()
    many = [{"urn": f"urn:r{i:03d}", "op": "update"} for i in range(up_api.MAX_DRIFTED_RESOURCES)]
    finding = drift.absorb(status, _check_update(drift_result={"resources": many, "changes": {"update": 240}}),
                           "c", NOW)
    assert finding.message.endswith(" and 230 more (status.drift)")
    assert finding.message.count("urn:r") == drift.MAX_MESSAGE_URNS
    assert status.drift is not None
    assert len(status.drift.resources or []) == drift_api.MAX_STATUS_RESOURCES


@pytest.mark.parametrize(("update", "message"), [
    (_check_update(failed=True, message="error: the provider is down"),
     "drift check c failed: error: the provider is down"),
    (None, "drift check c failed: its Update was deleted before it finished"),
    (_check_update(), "drift check c failed: the preview reported no drift result"),
])
def test_a_failed_check_is_unknown_not_a_failed_update(update: up_api.Update | None, message: str) -> None:
    stack = _stack(status={"drift": {"currentCheck": "c", "resources": [{"urn": URN_A, "op": "update"}]}})
    status = stack.status
    assert status is not None
    before = status.last_update
    finding = drift.absorb(status, update, "c", NOW)
    assert (finding.status, finding.reason, finding.message) == ("Unknown", "DriftCheckFailed", message)
    assert status.last_update == before
    assert status.drift is not None
    assert status.drift.last_check is not None
    assert status.drift.last_check.result == "failed"
    assert [r.urn for r in status.drift.resources or []] == [URN_A]  # the last known drift stays on record


def test_drift_a_failed_check_had_found_is_reported_as_drift_with_the_failure_on_record() -> None:
    """The Kubernetes provider's preview fails on a field a `kubectl edit` took (a server-side apply conflict) after
    the engine said the resource would be updated: that is the drift, not a check that found nothing."""
    status = stack_api.StackStatus()
    update = _check_update(failed=True, message="error: Apply failed with 1 conflict: conflict with \"kubectl-patch\"",
                           drift_result={"resources": [{"urn": URN_A, "op": "update"}], "changes": {"update": 1}})
    finding = drift.absorb(status, update, "c", NOW)
    assert finding == drift.Finding(
        "True", "DriftDetected",
        f"1 resource(s) drifted: {URN_A} (update) (the check's preview then failed: status.drift.lastCheck)")
    assert status.drift is not None
    assert status.drift.last_check is not None
    assert status.drift.last_check.result == "failed"
    assert "conflict with \"kubectl-patch\"" in (status.drift.last_check.message or "")
    assert [r.urn for r in status.drift.resources or []] == [URN_A]
    # a failed check that had found nothing is still a failed check
    empty = _check_update(failed=True, message="error: boom", drift_result={"resources": [], "changes": {}})
    assert drift.absorb(stack_api.StackStatus(), empty, "c", NOW).reason == "DriftCheckFailed"


def test_events_only_for_news_and_every_failure() -> None:
    drifted = drift.Finding("True", "DriftDetected", "1 resource(s) drifted: a (update)")
    clean = drift.Finding("False", "NoDrift", "the last drift check found no drift")
    failed = drift.Finding("Unknown", "DriftCheckFailed", "drift check c failed: x")
    assert drift.event(None, drifted) == ("Warning", "DriftDetected", drifted.message)
    after = drift.mark(None, drifted, NOW)
    assert drift.event(after, drifted) is None
    assert drift.event(after, drift.Finding("True", "DriftDetected", "2 resource(s) drifted: a, b")) is not None
    assert drift.event(after, clean) == ("Normal", "NoDriftDetected", clean.message)
    assert drift.event(drift.mark(None, clean, NOW), clean) is None
    assert drift.event(drift.mark(None, failed, NOW), failed) == ("Warning", "DriftCheckFailed", failed.message)


def _drifted_stack(remediate: bool | None, **status: Any) -> tuple[stack_api.Stack, list[Any]]:
    detection: dict[str, Any] = {"interval": "30m"}
    if remediate is not None:
        detection["remediate"] = remediate
    stack = _stack(detection, status={"drift": {"changes": {"update": 2}, **status}})
    found = drift.mark(conditions.mark_ready(None, now=NOW),
                       drift.Finding("True", "DriftDetected", "2 resource(s) drifted"), NOW)
    return stack, found


def test_remediation_is_one_update_with_refresh_and_only_when_asked() -> None:
    stack, found = _drifted_stack(True)
    assert drift.remediation_due(stack, found) == "Drift detected: 2 resource(s) drifted; remediating"
    assert drift.remediation_due(_drifted_stack(None)[0], found) is None
    assert drift.remediation_due(_drifted_stack(False)[0], found) is None
    assert drift.remediation_due(_drifted_stack(True, remediation="s-2")[0], found) is None  # already started
    assert drift.remediation_due(stack, conditions.mark_ready(None, now=NOW)) is None  # not drifted
    preview_only = _stack({"interval": "30m", "remediate": True}, preview=True,
                          status={"drift": {"changes": {"update": 2}}})
    assert drift.remediation_due(preview_only, found) is None

    up = {"spec": {"type": "up", "refresh": False}}
    drift.with_refresh(up, stack, found)
    assert up["spec"]["refresh"] is True
    untouched = {"spec": {"type": "up", "refresh": False}}
    drift.with_refresh(untouched, _drifted_stack(False)[0], found)
    assert untouched["spec"]["refresh"] is False
    status = stack.status
    assert status is not None
    drift.remediating(status, "s-2")
    assert status.drift is not None
    assert status.drift.remediation == "s-2"


def test_a_successful_up_with_refresh_remediates_the_drift() -> None:
    _, found = _drifted_stack(True)

    def update(type_: str, refresh: bool) -> up_api.Update:
        return up_api.Update.model_validate({"metadata": {"name": "s-2"}, "spec": {"type": type_, "refresh": refresh}})

    remediated = conditions.find(drift.after_update(found, update("up", True), NOW), conditions.DRIFTED)
    assert remediated is not None
    assert (remediated.status, remediated.reason) == ("False", "Remediated")
    assert remediated.message == "update s-2 refreshed and applied the program; the next drift check confirms"
    for kept in (update("up", False), update("preview", True)):
        assert conditions.is_true(drift.after_update(found, kept, NOW), conditions.DRIFTED)
    assert drift.after_update(conditions.mark_ready(None, now=NOW), update("up", True), NOW) == (
        conditions.mark_ready(None, now=NOW))


def test_removing_drift_detection_forgets_everything_it_added() -> None:
    stack, found = _drifted_stack(True)
    status = stack.status
    assert status is not None
    left = drift.forget(status, found)
    assert status.drift is None
    assert conditions.find(left, conditions.DRIFTED) is None
    assert conditions.is_true(left, conditions.READY)
