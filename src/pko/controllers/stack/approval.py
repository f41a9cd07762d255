"""Approvals bound to a reviewed preview (pko, `spec.approval`) — pure rules: what a gated Stack does next.

Why: with `spec.approval.required` an update is two steps. First a preview saves its update plan in the workspace
(its SHA-256 is the digest a person reviews, shown in `status.approval` with the preview's change summary); then,
once a StackApproval names this Stack and exactly that digest, an `up` applies that plan and nothing else
(`pulumi up --plan`). The plan belongs to the inputs it was previewed for — generation, reconcile request and
source commit — so any change makes it stale and brings a new preview with a new digest. An approval is used once,
refused when it names another digest or is older than the TTL, and every verdict lands on the approval's status.

The state lives in `status.approval` (:class:`~pko.api.stack.PlanReview`): `Previewing` while the plan-saving
preview runs (it is the Stack's `currentUpdate`), `AwaitingApproval` once its digest is known, `Approved` while the
approved `up` runs, `Unsupported` when the workspace agent cannot save plans (the Go agent: the Stack stalls and
nothing is applied until its inputs change). The plan lives in the workspace: when the approved `up` finds it gone
(the workspace was recreated since the preview), nothing ran, so that is no failed update to retry after a backoff
but a plan to preview anew; the approval that named it is marked `PlanNotFound`.

Must never: read the clock or do I/O; let an `up` start without a digest that an accepted approval names.
"""

from __future__ import annotations

import copy
import datetime
import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pko.api import approval as approval_api
from pko.api import conditions, names
from pko.api import stack as stack_api
from pko.api import update as up_api
from pko.api.meta import Condition
from pko.controllers.stack import ttl as stack_ttl
from pko.protocol import status as agent_status

DEFAULT_TTL_SECONDS = 3600

PREVIEWING = "Previewing"
AWAITING = "AwaitingApproval"
APPROVED = "Approved"
UNSUPPORTED = "Unsupported"

# The Stack's pko condition while a plan waits for a person, and the Reconciling reason meanwhile.
CONDITION_AWAITING = "AwaitingApproval"
RECONCILING_AWAITING = "AwaitingApproval"
STALLED_PLANS_UNSUPPORTED = "UpdatePlansUnsupported"


class Action(enum.Enum):
    PREVIEW = "preview"  # run a preview that saves its plan
    WAIT = "wait"  # a plan awaits approval; nothing to start
    APPLY = "apply"  # an accepted approval: run `up --plan`
    STALL = "stall"  # the agent cannot save plans; nothing is applied


@dataclass(frozen=True)
class Verdict:
    """The operator's decision on one StackApproval (written to its status, once)."""

    name: str
    accepted: bool
    reason: str
    message: str


@dataclass(frozen=True)
class Step:
    action: Action
    why: str = ""
    approval: approval_api.StackApproval | None = None  # APPLY: the approval accepted
    verdicts: list[Verdict] = field(default_factory=list)


@dataclass(frozen=True)
class Inputs:
    """What a plan was previewed for."""

    generation: int | None
    reconcile_request: str
    commit: str
    operation: str = "update"  # or "destroy": a plan of the other operation is stale too
    outputs: str = ""  # pko: the copy of the values spec.outputRefs read (outputrefs.py): new values, a new plan


def required(stack: stack_api.Stack) -> bool:
    """Only `up` is gated: previews change nothing, and deletion keeps the reference's behaviour here."""
    spec = stack_api.spec_of(stack)
    return (bool(spec.approval and spec.approval.required) and stack.metadata.deletion_timestamp is None
            and not spec.preview)


def destroy_protected(stack: stack_api.Stack) -> bool:
    """Destroy protection (pko `spec.destroyProtection`): only the destroy a deleted `destroyOnFinalize` Stack runs
    (or an expired one's, docs/ttl.md)."""
    spec = stack_api.spec_of(stack)
    return (bool(spec.destroy_protection and spec.destroy_protection.enabled)
            and stack.metadata.deletion_timestamp is not None and stack_ttl.destroys_on_finalize(stack)
            and not spec.preview)


def gated(stack: stack_api.Stack) -> bool:
    return required(stack) or destroy_protected(stack)


def threshold(stack: stack_api.Stack) -> int:
    protection = stack_api.spec_of(stack).destroy_protection
    return (protection.threshold if protection is not None else None) or 0


def deletes(review: stack_api.PlanReview) -> int:
    return int((review.changes or {}).get("delete", 0))


def ttl_seconds(stack: stack_api.Stack) -> int:
    policy = stack_api.spec_of(stack).approval
    return (policy.ttl_seconds if policy is not None and policy.ttl_seconds else None) or DEFAULT_TTL_SECONDS


def inputs_of(review: stack_api.PlanReview) -> Inputs:
    return Inputs(review.generation, review.reconcile_request or "", review.commit or "", review.operation or "update",
                  review.output_refs or "")


def is_decided(approval: approval_api.StackApproval) -> bool:
    return conditions.find(approval.status.conditions if approval.status else None,
                           approval_api.ACCEPTED) is not None


def _age(approval: approval_api.StackApproval, now: datetime.datetime) -> float:
    created = conditions.parse_time(approval.metadata.creation_timestamp) or now
    return (now - created).total_seconds()


def next_step(review: stack_api.PlanReview | None, current: Inputs, approvals: Sequence[approval_api.StackApproval],
              now: datetime.datetime, ttl: int, *, without_approval_up_to: int | None = None,
              confirmed: str | None = None) -> Step:
    """What a gated Stack whose update is due does next, and the verdicts on the approvals naming it that are not
    decided yet (sorted by name, so the oldest-named valid approval wins deterministically).

    Destroy protection passes `without_approval_up_to` (its threshold: a destroy deleting at most that many resources
    needs no confirmation) and `confirmed` (the digest the Stack's confirm-destroy annotation names)."""
    if review is not None and review.state == UNSUPPORTED and inputs_of(review) == current:
        return Step(Action.STALL, "the workspace agent cannot save update plans")
    if review is None or review.state not in (AWAITING,) or not review.digest:
        return Step(Action.PREVIEW, "no plan under review")
    if inputs_of(review) != current:
        return Step(Action.PREVIEW, "the source or spec changed since the plan was previewed")
    if without_approval_up_to is not None and deletes(review) <= without_approval_up_to:
        return Step(Action.APPLY, f"{deletes(review)} resources to delete: at most {without_approval_up_to} need no "
                                  "confirmation")
    if confirmed is not None and confirmed == review.digest:
        return Step(Action.APPLY, f"confirmed by the annotation {names.ANNOTATION_CONFIRM_DESTROY}")
    verdicts: list[Verdict] = []
    chosen: approval_api.StackApproval | None = None
    for candidate in sorted(approvals, key=lambda a: a.metadata.name or ""):
        if is_decided(candidate) or candidate.spec is None or candidate.metadata.deletion_timestamp:
            continue
        name = candidate.metadata.name or ""
        if candidate.spec.digest != review.digest:
            verdicts.append(Verdict(name, False, approval_api.REASON_DIGEST_MISMATCH,
                                    f"approves plan {candidate.spec.digest}, but the Stack awaits approval of plan "
                                    f"{review.digest} (a changed source or spec makes a new preview and digest)"))
        elif _age(candidate, now) > ttl:
            verdicts.append(Verdict(name, False, approval_api.REASON_EXPIRED,
                                    f"the approval is older than {ttl}s (spec.approval.ttlSeconds of the Stack): "
                                    "create a new one"))
        elif chosen is None:
            chosen = candidate
            verdicts.append(Verdict(name, True, approval_api.REASON_APPLIED,
                                    f"plan {review.digest} applied as approved by {candidate.spec.approved_by}"))
        # a second valid approval of the same plan stays undecided: the plan is applied once
    if chosen is not None:
        return Step(Action.APPLY, "approved", chosen, verdicts)
    return Step(Action.WAIT, "awaiting approval", None, verdicts)


def previewing(update_name: str, current: Inputs) -> stack_api.PlanReview:
    return stack_api.PlanReview(state=PREVIEWING, operation=current.operation, preview=update_name,
                                generation=current.generation, reconcile_request=current.reconcile_request or None,
                                commit=current.commit or None, output_refs=current.outputs or None)


def reviewed(review: stack_api.PlanReview, annotations: Mapping[str, str], digest_key: str, changes_key: str,
             now: datetime.datetime) -> stack_api.PlanReview:
    """The review once its preview succeeded: the digest and changes the Update controller put on the Update, or
    `Unsupported` when there is no digest."""
    digest = annotations.get(digest_key)
    if not digest:
        return review.model_copy(update={"state": UNSUPPORTED})
    try:
        changes = {str(k): int(v) for k, v in json.loads(annotations.get(changes_key) or "{}").items()}
    except (ValueError, AttributeError):
        changes = {}
    try:
        listed = json.loads(annotations.get(names.ANNOTATION_PLANNED_RESOURCES) or "null")
    except ValueError:
        listed = None
    resources = [str(r) for r in listed] if isinstance(listed, list) else None
    return review.model_copy(update={"state": AWAITING, "digest": digest, "changes": changes or None,
                                     "resources": resources, "previewed_at": conditions.format_time(now)})


def approved(review: stack_api.PlanReview, approval: approval_api.StackApproval | None,
             why: str = "") -> stack_api.PlanReview:
    """The review once applied: the StackApproval and its approver, or (destroy protection) why none was needed."""
    if approval is None:
        return review.model_copy(update={"state": APPROVED, "approval": None, "approved_by": why or None})
    spec = approval.spec
    return review.model_copy(update={"state": APPROVED, "approval": approval.metadata.name,
                                     "approved_by": spec.approved_by if spec else None})


def summary(changes: Mapping[str, int] | None) -> str:
    """`create=1, same=2` (operations in name order; "no changes" when empty)."""
    shown = [f"{kind}={count}" for kind, count in sorted((changes or {}).items()) if count]
    return ", ".join(shown) or "no changes"


def awaiting_message(review: stack_api.PlanReview, stack_name: str) -> str:
    if review.operation == "destroy":
        return (f"destroy {review.digest} would delete {deletes(review)} resources: confirm with a StackApproval "
                f"with stackName {stack_name} and digest {review.digest}, or annotate the Stack "
                f"{names.ANNOTATION_CONFIRM_DESTROY}={review.digest}")
    return (f"plan {review.digest} ({summary(review.changes)}) awaits approval: create a StackApproval with "
            f"stackName {stack_name} and digest {review.digest}")


def mark_awaiting(found: Sequence[Condition] | None, review: stack_api.PlanReview, stack_name: str,
                  now: datetime.datetime) -> list[Condition]:
    """Reconciling (a person's decision is pending, as with an update in flight) and `AwaitingApproval=True`."""
    message = awaiting_message(review, stack_name)
    result = conditions.mark_reconciling(found, RECONCILING_AWAITING, message, now=now)
    return conditions.set_condition(result, CONDITION_AWAITING, "True", AWAITING, message, now=now)


def settle_condition(found: Sequence[Condition] | None, review: stack_api.PlanReview | None) -> list[Condition]:
    """No `AwaitingApproval` condition unless a plan awaits approval (a Stack without approvals never has one)."""
    if review is not None and review.state == AWAITING:
        return list(found or ())
    return conditions.remove(found, CONDITION_AWAITING)


def unsupported_message() -> str:
    return ("spec.approval.required needs a workspace agent that saves update plans (the pko agent); this "
            "workspace's agent saved none, so nothing is applied. Use the pko agent image, or drop spec.approval.")


def is_plan_preview(update: up_api.Update, save_plan_key: str) -> bool:
    """A plan-saving preview, or (destroy protection) a destroy that only previews."""
    annotations = update.metadata.annotations or {}
    kind = update.spec.type if update.spec is not None else None
    return ((kind == up_api.PREVIEW and annotations.get(save_plan_key) == "true")
            or (kind == up_api.DESTROY and annotations.get(names.ANNOTATION_PREVIEW_ONLY) == "true"))


def lost_plan(update: up_api.Update) -> str | None:
    """The digest of an approved `up` that ran nothing because its workspace no longer held the plan (recreated
    since the preview: a replaced pod, the local runtime's operator restarted); None for any other Update."""
    digest = (update.metadata.annotations or {}).get(names.ANNOTATION_PLAN_DIGEST)
    kind = update.spec.type if update.spec is not None else None
    failed = conditions.find(update.status.conditions if update.status else None, conditions.FAILED)
    if (digest and kind == up_api.UP and failed is not None and failed.status == "True"
            and failed.reason == agent_status.REASON_PLAN_NOT_FOUND):
        return digest
    return None


def lost_plan_message(digest: str, review: stack_api.PlanReview | None) -> str:
    approved = (f" approved by {review.approved_by} (StackApproval {review.approval})"
                if review is not None and review.approval else "")
    return (f"plan {digest}{approved} is no longer in the workspace, which was recreated since the preview (a "
            "replaced pod, a restarted operator on the local runtime): nothing was applied; previewing anew for a new "
            "approval")


def destroy_preview(update: dict[str, Any]) -> dict[str, Any]:
    """The destroy the deleted Stack would run, as a preview of what it would delete."""
    result = copy.deepcopy(update)
    result["metadata"].setdefault("annotations", {})[names.ANNOTATION_PREVIEW_ONLY] = "true"
    return result


def unsupported_destroy_message() -> str:
    return ("spec.destroyProtection needs a workspace agent that previews a destroy (the pko agent); nothing was "
            "deleted and the finalizer stays. Use the pko agent image, or drop spec.destroyProtection.")


def plan_preview(update: dict[str, Any]) -> dict[str, Any]:
    """The Update the Stack would run, as a preview that saves its plan (same targets, refresh and message)."""
    result = copy.deepcopy(update)
    result["spec"]["type"] = up_api.PREVIEW
    result["metadata"].setdefault("annotations", {})[names.ANNOTATION_SAVE_PLAN] = "true"
    return result


def plan_up(update: dict[str, Any], digest: str) -> dict[str, Any]:
    """The Update the Stack would run, bound to the approved plan."""
    if not digest:
        raise ValueError("an approved up needs the plan digest")
    result = copy.deepcopy(update)
    result["metadata"].setdefault("annotations", {})[names.ANNOTATION_PLAN_DIGEST] = digest
    return result
