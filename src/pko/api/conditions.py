"""Condition types and reasons, and the kstatus "ready protocol" as pure functions on condition lists.

Why: tools such as kstatus, Flux and Argo read a Stack's ``Ready`` / ``Reconciling`` / ``Stalled`` conditions, and
users read the reasons; both are part of the contract. The helpers reproduce the Go operator's transitions
exactly (including apimachinery's rule that ``lastTransitionTime`` moves only when the status changes).

Must never: read the clock (callers pass ``now``) or mutate the list or conditions they are given.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence

from pko.api.meta import Condition, ConditionStatus

# Condition types.
READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"
# Workspace: Ready, Stalled. Update:
COMPLETE = "Complete"
FAILED = "Failed"
PROGRESSING = "Progressing"

# Ready reasons and messages.
NOT_READY_IN_PROGRESS = "NotReadyInProgress"
NOT_READY_STALLED = "NotReadyStalled"
READY_COMPLETED = "ProcessingCompleted"
MESSAGE_IN_PROGRESS = "reconciliation is in progress"
MESSAGE_STALLED = "reconciliation is stalled"
MESSAGE_READY = "the stack has been processed and is up to date"

# Reconciling reasons and messages.
RECONCILING_PROCESSING = "StackProcessing"
MESSAGE_WAITING_FOR_WORKSPACE = "waiting for workspace readiness"
MESSAGE_STACK_PROCESSING = "stack is being processed"
RECONCILING_RETRY = "RetryingAfterFailure"
RECONCILING_PREVIEW_FAILED = "PreviewFailed"
RECONCILING_PREREQUISITE_NOT_SATISFIED = "PrerequisiteNotSatisfied"
# pko: `spec.suspend` (Reconciling=False; not a reason of the Go operator).
RECONCILING_SUSPENDED = "Suspended"
MESSAGE_SUSPENDED = "the stack is suspended (spec.suspend is true): no new update starts until it is false"
MESSAGE_SUSPENDED_AFTER = "the stack is suspended: no update starts after this one"
# pko: `--max-active-workspaces` (docs/scale.md): the Workspace's Ready=False reason, and its Stack's Reconciling
# reason, while the Workspace waits for a slot of the pool of active workspaces.
QUEUED = "Queued"

# Stalled reasons.
STALLED_SPEC_INVALID = "SpecInvalid"
STALLED_SOURCE_UNAVAILABLE = "SourceUnavailable"
STALLED_PULUMI_VERSION_TOO_LOW = "PulumiVersionTooLow"
STALLED_WORKSPACE_FAILED = "WorkspaceFailed"
STALLED_UPDATE_FAILED = "UpdateFailed"
STALLED_NAMESPACE_TERMINATING = "NamespaceTerminating"
STALLED_CONFLICT = "UpdateConflict"

# pko: `spec.driftDetection` (docs/drift-detection.md): the Stack's `Drifted` condition, apart from the ready protocol
# (a drift check never changes Ready, Reconciling or Stalled).
DRIFTED = "Drifted"
DRIFT_DETECTED = "DriftDetected"  # True
DRIFT_NONE = "NoDrift"  # False
DRIFT_REMEDIATED = "Remediated"  # False: the remediating update succeeded
DRIFT_CHECK_FAILED = "DriftCheckFailed"  # Unknown
DRIFT_INVALID_SCHEDULE = "InvalidSchedule"  # Unknown


def retrying_message(failures: int) -> str:
    return f"{failures} update failure(s)"


def preview_failed_message(attempts: int) -> str:
    return f"preview failed ({attempts} attempt(s))"


def _failed(update_type: str, failures: int) -> str:
    # No failure counted stalls only with pko's `maxFailures: 0`: one update failed, and none was retried.
    return f"{update_type} failed {failures} times" if failures else f"{update_type} failed once"


def update_failed_message(update_type: str, failures: int) -> str:
    return f"{_failed(update_type, failures)}; not retrying until the spec or source changes"


def update_failed_retry_message(update_type: str, failures: int, interval: str) -> str:
    """pko: the `UpdateFailed` message when a stalled retry is configured (`retryPolicy.stalledRetryInterval…`)."""
    return (f"{_failed(update_type, failures)}; retrying {interval} after the last failure, or when the spec or "
            "source changes")


def format_time(moment: datetime.datetime) -> str:
    """A metav1.Time on the wire: RFC 3339 in UTC, whole seconds."""
    if moment.tzinfo is None:
        raise ValueError("a timezone-aware time is required")
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> datetime.datetime | None:
    """A metav1.Time from the wire (the inverse of :func:`format_time`); None when empty. The API server's own
    spelling is read by slicing (``strptime`` was 1.5% of the operator's CPU in a fleet: every Stack event's
    metrics and TTL look at timestamps); any other goes through ``strptime``, which accepts or refuses it as ever."""
    if not value:
        return None
    if _WIRE_TIME.fullmatch(value):
        return datetime.datetime(int(value[0:4]), int(value[5:7]), int(value[8:10]), int(value[11:13]),
                                 int(value[14:16]), int(value[17:19]), tzinfo=datetime.UTC)
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


_WIRE_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")


def find(conditions: Sequence[Condition] | None, type_: str) -> Condition | None:
    return next((c for c in conditions or () if c.type == type_), None)


def is_true(conditions: Sequence[Condition] | None, type_: str) -> bool:
    found = find(conditions, type_)
    return found is not None and found.status == "True"


def remove(conditions: Sequence[Condition] | None, type_: str) -> list[Condition]:
    return [c.model_copy() for c in conditions or () if c.type != type_]


def set_condition(conditions: Sequence[Condition] | None, type_: str, status: ConditionStatus, reason: str,
                  message: str, *, now: datetime.datetime, observed_generation: int | None = None
                  ) -> list[Condition]:
    """Add or update the condition of `type_` (apimachinery ``SetStatusCondition``): a new condition is appended;
    an existing one keeps its position and its ``lastTransitionTime`` unless its status changes."""
    result: list[Condition] = []
    found = False
    for condition in conditions or ():
        if condition.type != type_:
            result.append(condition.model_copy())
            continue
        found = True
        changed_at = format_time(now) if condition.status != status else condition.last_transition_time
        result.append(condition.model_copy(update={
            "status": status, "reason": reason, "message": message,
            "observed_generation": observed_generation, "last_transition_time": changed_at,
        }))
    if not found:
        result.append(Condition(type=type_, status=status, reason=reason, message=message,
                                observed_generation=observed_generation, last_transition_time=format_time(now)))
    return result


def mark_reconciling(conditions: Sequence[Condition] | None, reason: str, message: str, *,
                     now: datetime.datetime) -> list[Condition]:
    """In progress: no Stalled; Ready=False (NotReadyInProgress); Reconciling=True with `reason`."""
    result = remove(conditions, STALLED)
    result = set_condition(result, READY, "False", NOT_READY_IN_PROGRESS, MESSAGE_IN_PROGRESS, now=now)
    return set_condition(result, RECONCILING, "True", reason, message, now=now)


def mark_stalled(conditions: Sequence[Condition] | None, reason: str, message: str, *,
                 now: datetime.datetime) -> list[Condition]:
    """Stuck until the spec or source changes: no Reconciling; Ready=False (NotReadyStalled); Stalled=True."""
    result = remove(conditions, RECONCILING)
    result = set_condition(result, READY, "False", NOT_READY_STALLED, MESSAGE_STALLED, now=now)
    return set_condition(result, STALLED, "True", reason, message, now=now)


def mark_ready(conditions: Sequence[Condition] | None, *, now: datetime.datetime) -> list[Condition]:
    """Up to date: neither Reconciling nor Stalled; Ready=True (ProcessingCompleted)."""
    result = remove(remove(conditions, RECONCILING), STALLED)
    return set_condition(result, READY, "True", READY_COMPLETED, MESSAGE_READY, now=now)
