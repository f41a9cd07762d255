"""Approvals bound to a reviewed preview (pko `spec.approval`): the pure rules — when a gated Stack previews, waits
or applies; which approvals are refused (another plan's digest, expired) or accepted; the stale plan; the Update
changes; the Stack's AwaitingApproval condition. State in, decision out."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from pko.api import approval as approval_api
from pko.api import conditions, names
from pko.api import stack as stack_api
from pko.controllers.stack import approval as gate
from pko.controllers.update import plan as update_plan

NOW = datetime.datetime(2026, 11, 22, 12, 0, tzinfo=datetime.UTC)
DIGEST = "a" * 64
OTHER = "b" * 64
INPUTS = gate.Inputs(3, "", "abc123")


def _stack(**spec: Any) -> stack_api.Stack:
    return stack_api.Stack.model_validate({"metadata": {"name": "s", "namespace": "n", "generation": 3},
                                           "spec": {"stack": "dev", **spec}})


def _review(state: str = gate.AWAITING, digest: str | None = DIGEST, **fields: Any) -> stack_api.PlanReview:
    base = {"state": state, "digest": digest, "generation": 3, "commit": "abc123", "preview": "s-1"}
    return stack_api.PlanReview.model_validate({**base, **fields})


def _approval(name: str, digest: str = DIGEST, age: float = 10.0, decided: bool = False,
              by: str = "alice") -> approval_api.StackApproval:
    created = conditions.format_time(NOW - datetime.timedelta(seconds=age))
    status = ({"conditions": [{"type": "Accepted", "status": "False", "reason": "Expired", "message": "",
                               "lastTransitionTime": created}]} if decided else None)
    return approval_api.StackApproval.model_validate({
        "metadata": {"name": name, "namespace": "n", "creationTimestamp": created},
        "spec": {"stackName": "s", "digest": digest, "approvedBy": by}, "status": status})


def test_only_an_up_of_a_stack_that_asks_is_gated() -> None:
    assert not gate.required(_stack())
    assert not gate.required(_stack(approval={"required": False}))
    assert gate.required(_stack(approval={"required": True}))
    assert not gate.required(_stack(approval={"required": True}, preview=True))
    deleting = _stack(approval={"required": True})
    deleting.metadata.deletion_timestamp = "2026-11-22T12:00:00Z"
    assert not gate.required(deleting)


def test_ttl_defaults_to_an_hour() -> None:
    assert gate.ttl_seconds(_stack(approval={"required": True})) == 3600
    assert gate.ttl_seconds(_stack(approval={"required": True, "ttlSeconds": 60})) == 60


@pytest.mark.parametrize("review", [None, _review(gate.PREVIEWING, None), _review(gate.APPROVED)])
def test_without_a_plan_awaiting_approval_a_preview_runs(review: stack_api.PlanReview | None) -> None:
    step = gate.next_step(review, INPUTS, [_approval("x")], NOW, 3600)
    assert step.action == gate.Action.PREVIEW
    assert step.verdicts == []  # nothing is decided while no plan awaits


@pytest.mark.parametrize("changed", [gate.Inputs(4, "", "abc123"), gate.Inputs(3, "sync-1", "abc123"),
                                     gate.Inputs(3, "", "def456")])
def test_a_changed_spec_request_or_commit_makes_the_plan_stale(changed: gate.Inputs) -> None:
    step = gate.next_step(_review(), changed, [_approval("x")], NOW, 3600)
    assert step.action == gate.Action.PREVIEW
    assert "changed" in step.why


def test_an_update_plan_is_stale_for_a_destroy() -> None:
    step = gate.next_step(_review(), gate.Inputs(3, "", "abc123", "destroy"), [], NOW, 3600, without_approval_up_to=9)
    assert step.action == gate.Action.PREVIEW


def test_waits_without_an_approval() -> None:
    assert gate.next_step(_review(), INPUTS, [], NOW, 3600).action == gate.Action.WAIT


def test_an_approval_of_the_plan_is_applied_once_and_records_who() -> None:
    first, second = _approval("a1", by="alice"), _approval("a2", by="bob")
    step = gate.next_step(_review(), INPUTS, [second, first], NOW, 3600)
    assert step.action == gate.Action.APPLY
    assert step.approval is first
    assert [(v.name, v.accepted, v.reason) for v in step.verdicts] == [("a1", True, "Applied")]
    assert "approved by alice" in step.verdicts[0].message
    review = gate.approved(_review(), first)
    assert (review.state, review.approval, review.approved_by) == (gate.APPROVED, "a1", "alice")


def test_another_digest_and_an_expired_approval_are_refused() -> None:
    step = gate.next_step(_review(), INPUTS, [_approval("old", OTHER), _approval("late", age=3601)], NOW, 3600)
    assert step.action == gate.Action.WAIT
    verdicts = {v.name: v for v in step.verdicts}
    assert (verdicts["old"].accepted, verdicts["old"].reason) == (False, approval_api.REASON_DIGEST_MISMATCH)
    assert OTHER in verdicts["old"].message
    assert DIGEST in verdicts["old"].message
    assert (verdicts["late"].accepted, verdicts["late"].reason) == (False, approval_api.REASON_EXPIRED)
    assert "3600s" in verdicts["late"].message


def test_a_decided_approval_is_never_decided_again() -> None:
    step = gate.next_step(_review(), INPUTS, [_approval("done", decided=True)], NOW, 3600)
    assert (step.action, step.verdicts) == (gate.Action.WAIT, [])


def test_an_agent_without_plans_stalls_until_the_inputs_change() -> None:
    unsupported = _review(gate.UNSUPPORTED, None)
    assert gate.next_step(unsupported, INPUTS, [_approval("x")], NOW, 3600).action == gate.Action.STALL
    assert gate.next_step(unsupported, gate.Inputs(4, "", "abc123"), [], NOW, 3600).action == gate.Action.PREVIEW


def test_the_preview_result_becomes_the_review() -> None:
    previewing = gate.previewing("s-1", INPUTS)
    annotations = update_plan.planned_annotations(DIGEST, {"create": 2, "same": 0})
    review = gate.reviewed(previewing, annotations, names.ANNOTATION_PLANNED_DIGEST,
                           names.ANNOTATION_PLANNED_CHANGES, NOW)
    assert (review.state, review.digest, review.changes, review.generation, review.commit) == (
        gate.AWAITING, DIGEST, {"create": 2, "same": 0}, 3, "abc123")
    assert gate.summary(review.changes) == "create=2"
    no_plan = gate.reviewed(previewing, {}, names.ANNOTATION_PLANNED_DIGEST, names.ANNOTATION_PLANNED_CHANGES, NOW)
    assert no_plan.state == gate.UNSUPPORTED


def test_is_plan_preview_knows_both_previews() -> None:
    from pko.api import update as up_api
    preview = up_api.Update.model_validate({"metadata": {"annotations": {names.ANNOTATION_SAVE_PLAN: "true"}},
                                            "spec": {"type": "preview"}})
    destroy = up_api.Update.model_validate({"metadata": {"annotations": {names.ANNOTATION_PREVIEW_ONLY: "true"}},
                                            "spec": {"type": "destroy"}})
    plain = up_api.Update.model_validate({"spec": {"type": "destroy"}})
    assert gate.is_plan_preview(preview, names.ANNOTATION_SAVE_PLAN)
    assert gate.is_plan_preview(destroy, names.ANNOTATION_SAVE_PLAN)
    assert not gate.is_plan_preview(plain, names.ANNOTATION_SAVE_PLAN)


def test_an_approved_up_that_found_no_plan_lost_it_and_nothing_else_did() -> None:
    from pko.api import update as up_api
    from pko.protocol import status as agent_status

    def update(kind: str = "up", digest: str | None = DIGEST, reason: str = agent_status.REASON_PLAN_NOT_FOUND,
               failed: str = "True") -> up_api.Update:
        return up_api.Update.model_validate({
            "metadata": {"annotations": {names.ANNOTATION_PLAN_DIGEST: digest} if digest else {}},
            "spec": {"type": kind},
            "status": {"conditions": [{"type": "Failed", "status": failed, "reason": reason, "message": "",
                                       "lastTransitionTime": conditions.format_time(NOW)}]}})

    assert gate.lost_plan(update()) == DIGEST
    assert gate.lost_plan(update(reason="UpdateConflict")) is None  # the up ran and failed: a failure to retry
    assert gate.lost_plan(update(failed="False")) is None
    assert gate.lost_plan(update(digest=None)) is None  # not an approved up
    assert gate.lost_plan(update(kind="preview")) is None
    assert gate.lost_plan(up_api.Update.model_validate({"spec": {"type": "up"}})) is None
    approved = _review(gate.APPROVED, approval="ok", approved_by="alice")
    message = gate.lost_plan_message(DIGEST, approved)
    assert message.startswith(f"plan {DIGEST} approved by alice (StackApproval ok) is no longer in the workspace")
    assert message.endswith("nothing was applied; previewing anew for a new approval")


def test_the_updates_a_gate_creates() -> None:
    update = {"metadata": {"name": "s-1", "labels": {}}, "spec": {"type": "up", "stackName": "dev"}}
    preview = gate.plan_preview(update)
    assert preview["spec"]["type"] == "preview"
    assert preview["metadata"]["annotations"] == {names.ANNOTATION_SAVE_PLAN: "true"}
    assert update["spec"]["type"] == "up"  # the input is left alone
    bound = gate.plan_up(update, DIGEST)
    assert bound["metadata"]["annotations"] == {names.ANNOTATION_PLAN_DIGEST: DIGEST}
    with pytest.raises(ValueError, match="digest"):
        gate.plan_up(update, "")
    assert update_plan.plan_gate(preview["metadata"]["annotations"], "preview") == update_plan.PlanGate(save_plan=True)
    assert update_plan.plan_gate(bound["metadata"]["annotations"], "up") == update_plan.PlanGate(plan_digest=DIGEST)
    assert update_plan.plan_gate({}, "up") == update_plan.PlanGate()


def test_the_agent_capability_is_read_from_the_initial_metadata() -> None:
    assert update_plan.supports_plans((("pko-agent-capabilities", "update-plans"),))
    assert not update_plan.supports_plans((("other", "update-plans"),))
    assert not update_plan.supports_plans(None)
    assert gate.STALLED_PLANS_UNSUPPORTED == update_plan.REASON_PLANS_UNSUPPORTED


def test_the_awaiting_condition_only_while_a_plan_awaits() -> None:
    found = gate.mark_awaiting(None, _review(changes={"create": 1}), "s", NOW)
    awaiting = conditions.find(found, gate.CONDITION_AWAITING)
    assert awaiting is not None
    assert awaiting.status == "True"
    assert DIGEST in awaiting.message
    assert "create=1" in awaiting.message
    assert conditions.find(found, conditions.READY).status == "False"  # type: ignore[union-attr]
    assert gate.settle_condition(found, _review()) == found
    assert conditions.find(gate.settle_condition(found, _review(gate.APPROVED)), gate.CONDITION_AWAITING) is None
    assert conditions.find(gate.settle_condition(found, None), gate.CONDITION_AWAITING) is None


# --- destroy protection (pko `spec.destroyProtection`) ----------------------------------------------------------

def _deleting(**spec: Any) -> stack_api.Stack:
    stack = _stack(**spec)
    stack.metadata.deletion_timestamp = "2026-11-22T12:00:00Z"
    return stack


def test_only_the_destroy_of_a_deleted_destroy_on_finalize_stack_is_protected() -> None:
    protection = {"enabled": True, "threshold": 3}
    assert gate.destroy_protected(_deleting(destroyOnFinalize=True, destroyProtection=protection))
    assert not gate.destroy_protected(_stack(destroyOnFinalize=True, destroyProtection=protection))
    assert not gate.destroy_protected(_deleting(destroyProtection=protection))
    assert not gate.destroy_protected(_deleting(destroyOnFinalize=True, destroyProtection={"enabled": False}))
    assert not gate.destroy_protected(_deleting(destroyOnFinalize=True))
    assert gate.threshold(_deleting(destroyOnFinalize=True, destroyProtection=protection)) == 3
    assert gate.threshold(_deleting(destroyOnFinalize=True, destroyProtection={"enabled": True})) == 0


def test_a_destroy_at_or_below_the_threshold_needs_no_confirmation() -> None:
    review = _review(changes={"delete": 2}, operation="destroy")
    destroy = gate.Inputs(3, "", "abc123", "destroy")
    assert gate.next_step(review, destroy, [], NOW, 3600, without_approval_up_to=2).action == gate.Action.APPLY
    assert gate.next_step(review, destroy, [], NOW, 3600, without_approval_up_to=1).action == gate.Action.WAIT
    assert gate.next_step(review, destroy, [], NOW, 3600).action == gate.Action.WAIT


def test_the_annotation_confirms_only_the_shown_digest() -> None:
    review = _review(changes={"delete": 5}, operation="destroy")
    destroy = gate.Inputs(3, "", "abc123", "destroy")
    assert gate.next_step(review, destroy, [], NOW, 3600, without_approval_up_to=0,
                          confirmed=DIGEST).action == gate.Action.APPLY
    assert gate.next_step(review, destroy, [], NOW, 3600, without_approval_up_to=0,
                          confirmed=OTHER).action == gate.Action.WAIT
    assert gate.approved(review, None, "confirmed").approved_by == "confirmed"
    assert "would delete 5 resources" in gate.awaiting_message(review, "s")
    assert f"{names.ANNOTATION_CONFIRM_DESTROY}={DIGEST}" in gate.awaiting_message(review, "s")


def test_a_destroy_preview_is_a_plan_preview_that_lists_what_it_deletes() -> None:
    update = {"metadata": {"name": "s-2"}, "spec": {"type": "destroy"}}
    preview = gate.destroy_preview(update)
    assert update_plan.plan_gate(preview["metadata"]["annotations"], "destroy") == update_plan.PlanGate(
        destroy_preview=True)
    annotations = update_plan.planned_annotations(DIGEST, {"delete": 2}, [f"urn:{i}" for i in range(150)])
    destroy_inputs = gate.Inputs(3, "", "abc123", "destroy")
    review = gate.reviewed(gate.previewing("s-2", destroy_inputs), annotations, names.ANNOTATION_PLANNED_DIGEST,
                           names.ANNOTATION_PLANNED_CHANGES, NOW)
    assert (review.operation, review.state, gate.deletes(review)) == ("destroy", gate.AWAITING, 2)
    assert review.resources == [f"urn:{i}" for i in range(update_plan.MAX_PLANNED_RESOURCES)]
