"""pko's drift checks (`spec.driftDetection`) as pure rules: when one starts, the Update it is, how its result
becomes the Stack's `Drifted` condition and `status.drift`, and when drift is remediated.

Why: a drift check is a `pulumi preview --refresh` — read-only — run as an Update of type `preview` (labelled
`pulumi.com/drift-check`) in the Stack's own workspace, so it uses the same agent, credentials and program as the
Stack's updates. It is never a failure of the Stack: `lastUpdate` (the Go operator's "last update"), the failure
counter, `Ready`, `Reconciling` and `Stalled` are untouched; only `Drifted` and `status.drift` report it. It starts
only when nothing else is due: the last update succeeded, the Stack is synced, not suspended, not deleting, and no
Update is in flight; and while it runs no update starts (the reconciler waits for it as for an update), so two
operations never contend for the stack's lock.

With `remediate: true`, a check that finds drift makes the Stack run one update — with refresh, since an `up`
without it compares the program with the stale state and changes nothing — and any update with refresh that
succeeds while the Stack is drifted marks it `Remediated`; the next check confirms.

Must never: read the clock (callers pass `now`), do I/O, or put more than a bounded list of URNs in a condition or
status.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pko.api import conditions
from pko.api import drift as drift_api
from pko.api import stack as stack_api
from pko.api import update as up_api
from pko.api import workspace as ws_api
from pko.api.meta import Condition
from pko.controllers.stack import driftschedule, sync, updates
from pko.runtime import sharding

CHECK_MESSAGE = "Drift check"
SUCCEEDED = "succeeded"
FAILED = "failed"
MAX_MESSAGE_URNS = 10


def enabled(stack: stack_api.Stack) -> bool:
    return stack_api.spec_of(stack).drift_detection is not None


def in_flight(status: stack_api.StackStatus) -> str | None:
    """The drift-check Update the Stack is waiting for, if any."""
    return status.drift.current_check if status.drift is not None else None


@dataclass(frozen=True)
class Plan:
    """What the schedule says now: `due` (start a check), else `wait` seconds until it is (None: no check is
    scheduled), or the `problem` that keeps the schedule from running."""

    due: bool = False
    wait: float | None = None
    problem: str | None = None


def plan(stack: stack_api.Stack, now: datetime.datetime) -> Plan:
    """Whether a check starts now, for a Stack that is otherwise synced (no update due)."""
    spec = stack_api.spec_of(stack)
    status = stack.status or stack_api.StackStatus()
    last = status.last_update
    if (spec.drift_detection is None or stack.metadata.deletion_timestamp is not None or sync.is_suspended(stack)
            or in_flight(status) or status.current_update is not None):
        return Plan()
    try:
        schedule = driftschedule.parse(spec.drift_detection)
    except driftschedule.ScheduleError as err:
        return Plan(problem=str(err))
    if last is None or last.state != stack_api.STATE_SUCCEEDED:
        return Plan()  # checks compare with a successful update; a failing Stack has its retries
    previous = status.drift.last_check if status.drift is not None else None
    wait = driftschedule.wait(
        schedule, stack.metadata.uid or stack.metadata.name or "",
        last_check=conditions.parse_time(previous.start_time) if previous is not None else None,
        anchor=conditions.parse_time(last.last_resync_time) or now, now=now)
    return Plan(due=wait <= 0, wait=wait)


def shows_problem(found: Sequence[Condition] | None) -> bool:
    drifted = conditions.find(found, conditions.DRIFTED)
    return drifted is not None and drifted.reason == conditions.DRIFT_INVALID_SCHEDULE


def mark_schedule(found: Sequence[Condition] | None, problem: str | None,
                  now: datetime.datetime) -> list[Condition]:
    """`Drifted=Unknown/InvalidSchedule` while the schedule cannot run; dropped once it can (no check has said
    anything yet)."""
    if problem is not None:
        return conditions.set_condition(found, conditions.DRIFTED, "Unknown", conditions.DRIFT_INVALID_SCHEDULE,
                                        problem, now=now)
    return conditions.remove(found, conditions.DRIFTED) if shows_problem(found) else list(found or ())


def forget(status: stack_api.StackStatus, found: Sequence[Condition] | None) -> list[Condition]:
    """`driftDetection` was removed: no `status.drift`, no `Drifted` (a Stack without it looks as with the Go
    operator). Only called when no check is in flight."""
    status.drift = None
    return conditions.remove(found, conditions.DRIFTED)


def check_update(stack: stack_api.Stack, workspace: ws_api.Workspace, unix_millis: int,
                 shard: sharding.Shard = sharding.EVERYTHING) -> dict[str, Any]:
    """The Update of one drift check: the Stack's update (template, targets, owners) as a labelled preview with
    refresh."""
    update = updates.build(stack, workspace, CHECK_MESSAGE, unix_millis, shard=shard)
    spec = update["spec"]
    spec["type"] = up_api.PREVIEW
    spec["refresh"] = True
    for field in ("expectNoChanges", "runProgram", "continueOnError", "remove"):
        spec.pop(field, None)
    update["metadata"].setdefault("labels", {})[up_api.LABEL_DRIFT_CHECK] = "true"
    return update


def started(status: stack_api.StackStatus, name: str) -> None:
    status.drift = (status.drift or drift_api.DriftStatus()).model_copy(update={"current_check": name})


@dataclass(frozen=True)
class Finding:
    """What a finished check says: the `Drifted` condition it sets, and the event it deserves."""

    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str


def _listing(resources: Sequence[up_api.DriftedResource], total: int) -> str:
    shown = ", ".join(f"{r.urn} ({r.op})" for r in resources[:MAX_MESSAGE_URNS])
    more = total - min(len(resources), MAX_MESSAGE_URNS)
    return shown + (f" and {more} more (status.drift)" if more > 0 else "")


def absorb(status: stack_api.StackStatus, update: up_api.Update | None, name: str,
           now: datetime.datetime) -> Finding:
    """Record the finished check `name` (`update` None: it is gone) in `status.drift`; the finding it reports.
    `lastUpdate` is not touched: a failed check is no failed update."""
    previous = status.drift or drift_api.DriftStatus()
    up_status = (update.status if update is not None else None) or up_api.UpdateStatus()
    complete = conditions.find(up_status.conditions, conditions.COMPLETE)
    end = up_status.end_time or (complete.last_transition_time if complete is not None else None)
    check = drift_api.DriftCheck(
        name=name, start_time=(update.metadata.creation_timestamp if update is not None else None)
        or conditions.format_time(now), end_time=end or conditions.format_time(now))
    failed = update is None or conditions.is_true(up_status.conditions, conditions.FAILED)
    if failed and up_status.drift is not None and any((up_status.drift.changes or {}).values()):
        # The preview had already said what an update would change when a later step failed: the Kubernetes
        # provider's dry-run apply refuses a field another manager took (a `kubectl edit`), which is that very drift.
        # Drift found is reported as such; the failure stays in status.drift.lastCheck.
        return _drift_found(status, up_status.drift, check.model_copy(update={
            "result": FAILED, "message": up_status.message or "the preview failed"}),
            " (the check's preview then failed: status.drift.lastCheck)")
    if failed or up_status.drift is None:
        if update is None:
            message = "its Update was deleted before it finished"
        elif failed:
            message = up_status.message or "the preview failed"
        else:  # an Update controller that does not write status.drift (the Go operator's) ran it
            message = "the preview reported no drift result"
        check = check.model_copy(update={"result": FAILED, "message": message})
        status.drift = previous.model_copy(update={"current_check": None, "last_check": check})
        return Finding("Unknown", conditions.DRIFT_CHECK_FAILED, f"drift check {name} failed: {message}")
    return _drift_found(status, up_status.drift, check.model_copy(update={"result": SUCCEEDED}))


def _drift_found(status: stack_api.StackStatus, found: up_api.UpdateDrift, check: drift_api.DriftCheck,
                 note: str = "") -> Finding:
    resources = list(found.resources or [])[:drift_api.MAX_STATUS_RESOURCES]
    changes = dict(found.changes or {})
    total = sum(changes.values())
    status.drift = drift_api.DriftStatus(
        last_check=check, resources=resources or None, changes=changes or None,
        # a new finding of drift is remediated anew; none leaves nothing to remediate
        remediation=None)
    if total == 0:
        return Finding("False", conditions.DRIFT_NONE, "the last drift check found no drift")
    return Finding("True", conditions.DRIFT_DETECTED,
                   f"{total} resource(s) drifted: {_listing(resources, total)}{note}")


def failed_to_start(status: stack_api.StackStatus, message: str, now: datetime.datetime) -> Finding:
    """A due check could not start (its workspace failed): a failed check, retried on the schedule."""
    previous = status.drift or drift_api.DriftStatus()
    check = drift_api.DriftCheck(start_time=conditions.format_time(now), end_time=conditions.format_time(now),
                                 result=FAILED, message=message)
    status.drift = previous.model_copy(update={"current_check": None, "last_check": check})
    return Finding("Unknown", conditions.DRIFT_CHECK_FAILED, f"drift check failed: {message}")


def mark(found: Sequence[Condition] | None, finding: Finding, now: datetime.datetime) -> list[Condition]:
    return conditions.set_condition(found, conditions.DRIFTED, finding.status, finding.reason, finding.message,
                                    now=now)


def event(found: Sequence[Condition] | None, finding: Finding) -> tuple[str, str, str] | None:
    """(type, reason, message) of the event a finding deserves, given the conditions before it: drift when it is
    new or different, its absence when that is new, and every failed check."""
    before = conditions.find(found, conditions.DRIFTED)
    if finding.status == "True":
        if before is not None and before.status == "True" and before.message == finding.message:
            return None
        return "Warning", "DriftDetected", finding.message
    if finding.status == "False":
        if before is not None and before.status == "False":
            return None
        return "Normal", "NoDriftDetected", finding.message
    return "Warning", "DriftCheckFailed", finding.message


def _drifted(found: Sequence[Condition] | None) -> bool:
    return conditions.is_true(found, conditions.DRIFTED)


def remediation_due(stack: stack_api.Stack, found: Sequence[Condition] | None) -> str | None:
    """The reason for a remediating update (it becomes the `StackUpdateDetected` event and the Update's message),
    when the last check found drift that `remediate: true` asks to fix and no update was started for it yet."""
    spec = stack_api.spec_of(stack)
    status = stack.status or stack_api.StackStatus()
    if (spec.drift_detection is None or not spec.drift_detection.remediate or spec.preview
            or not _drifted(found) or status.drift is None or status.drift.remediation):
        return None
    total = sum((status.drift.changes or {}).values())
    return f"Drift detected: {total} resource(s) drifted; remediating"


def remediating(status: stack_api.StackStatus, update_name: str) -> None:
    status.drift = (status.drift or drift_api.DriftStatus()).model_copy(update={"remediation": update_name})


def with_refresh(update: dict[str, Any], stack: stack_api.Stack, found: Sequence[Condition] | None) -> None:
    """An `up` started while the Stack is drifted and `remediate: true` refreshes first (else it fixes nothing)."""
    spec = stack_api.spec_of(stack)
    remediate = spec.drift_detection is not None and bool(spec.drift_detection.remediate)
    if remediate and _drifted(found) and update["spec"].get("type") == up_api.UP:
        update["spec"]["refresh"] = True


def after_update(found: Sequence[Condition] | None, update: up_api.Update, now: datetime.datetime
                 ) -> list[Condition]:
    """A successful `up` with refresh applied the program over the real state: the drift is gone."""
    spec = update.spec or up_api.UpdateSpec()
    if not _drifted(found) or spec.type != up_api.UP or not spec.refresh:
        return list(found or ())
    return conditions.set_condition(
        found, conditions.DRIFTED, "False", conditions.DRIFT_REMEDIATED,
        f"update {update.metadata.name} refreshed and applied the program; the next drift check confirms", now=now)

