"""The StackApproval kind (``pulumi.com/v1alpha1``, pko only): a person's approval of one reviewed update plan.

Why a separate object: RBAC decides who may approve (``create`` on ``stackapprovals``) independently of who may edit
a Stack, and the approval names exactly what was reviewed — the Stack and the SHA-256 of the plan its preview saved
(shown in the Stack's ``status.approval``). The API server refuses an approval without a Stack name, a well-formed
digest or ``approvedBy``, and any change of ``spec`` after creation; the chart's ValidatingAdmissionPolicy
(docs/approvals.md) checks that ``approvedBy`` is the requesting user. The operator only reads approvals and writes
their ``status`` (accepted or refused, and why).

Must never: carry anything secret; default a field.
"""

from __future__ import annotations

from typing import Annotated

import pydantic

from pko.api.meta import Conditions, ObjectMeta, Time, Wire
from pko.api.schema import MaxLength, MinLength, Pattern

GROUP = "pulumi.com"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "StackApproval"
PLURAL = "stackapprovals"

DIGEST_PATTERN = "^[0-9a-f]{64}$"
SPEC_IMMUTABLE_RULE = "self == oldSelf"
SPEC_IMMUTABLE_MESSAGE = "a StackApproval cannot be changed: create a new one"

# status.conditions[type=Accepted]
ACCEPTED = "Accepted"
REASON_APPLIED = "Applied"
REASON_DIGEST_MISMATCH = "DigestMismatch"
REASON_EXPIRED = "Expired"
REASON_PLAN_NOT_FOUND = "PlanNotFound"  # accepted, but the workspace lost the plan before its up: nothing applied


class StackApprovalSpec(Wire):
    """What is approved, and by whom."""

    stack_name: Annotated[str, MinLength(1), MaxLength(253)] = pydantic.Field(
        description="The Stack (in this namespace) whose reviewed plan is approved.")
    digest: Annotated[str, Pattern(DIGEST_PATTERN)] = pydantic.Field(
        description="The plan digest shown in the Stack's status.approval.digest (64 lowercase hex digits).")
    approved_by: Annotated[str, MinLength(1)] = pydantic.Field(
        description="Who approves: the requesting user's name where the chart's admission policy is installed.")
    comment: str | None = pydantic.Field(None, description="Free text for the audit trail.")


class StackApprovalStatus(Wire):
    """What the operator made of the approval."""

    conditions: Conditions | None = None
    update: str | None = pydantic.Field(None, description="The Update that applied the approved plan.")
    decided_at: Time | None = None


class StackApproval(Wire):
    api_version: str = API_VERSION
    kind: str = KIND
    metadata: ObjectMeta = pydantic.Field(default_factory=ObjectMeta)
    spec: StackApprovalSpec | None = None
    status: StackApprovalStatus | None = None
