"""What one pass of the Stack reconciler does next — pure, state in, step out.

Why separate: a pass has three points where it chooses its road (pko-v2 §3.1), and each choice is a rule of the
contract that is worth testing without an API server: after a finished Update is absorbed (release a deleting
Stack, stay suspended, or go on and find the source), once the source and its Workspace are known (synced, a drift
check, or an update), and once the Workspace is applied (wait for it, stall on it, or start). The reconciler
(:mod:`reconciler`) gathers what each choice needs, asks here, and runs the answer in a short ``match``; the I/O
between the choices (fetching a source, reading a StackApproval or a prerequisite, applying the Workspace) stays
there.

Must never: read the clock or do I/O (callers pass `now` and the objects they read).
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pko.api import conditions
from pko.api import stack as stack_api
from pko.api import update as up_api
from pko.api import workspace as ws_api
from pko.api.meta import Condition, ObjectMeta
from pko.controllers.stack import drift, sync, ttl

# --- the objects a pass reads -------------------------------------------------------------------------------


def _observed(meta: ObjectMeta, observed_generation: int | None) -> bool:
    return observed_generation == (meta.generation or 0)


def update_complete(update: up_api.Update) -> bool:
    """The Update finished, and its status speaks of its current generation."""
    status = update.status or up_api.UpdateStatus()
    return _observed(update.metadata, status.observed_generation) and conditions.is_true(status.conditions,
                                                                                          conditions.COMPLETE)


def update_finished(update: up_api.Update) -> bool:
    """The Update finished, whatever generation of its spec its status speaks of: a completed Update never runs
    again, so one whose spec changed while it ran (its status then speaks of the generation it started at) is over
    too, and waiting for it to observe the new generation would wedge its Stack for ever (PKO#1292)."""
    return conditions.is_true(update.status.conditions if update.status else None, conditions.COMPLETE)


def workspace_ready(ws: ws_api.Workspace) -> bool:
    status = ws.status or ws_api.WorkspaceStatus()
    return (not ws.metadata.deletion_timestamp and _observed(ws.metadata, status.observed_generation)
            and conditions.is_true(status.conditions, conditions.READY))


def status_body(status: stack_api.StackStatus) -> dict[str, Any]:
    """The status as the reconciler writes it: the reference always sends the two observed fields, even empty."""
    body = status.to_wire()
    body["observedGeneration"] = status.observed_generation or 0
    body["observedReconcileRequest"] = status.observed_reconcile_request or ""
    return body


def status_unchanged(stack: stack_api.Stack, body: Mapping[str, Any]) -> bool:
    """The status a save would write is the one the Stack has: the Stack controller is its only writer, so the
    apply would change nothing (a field left out of `body` would be removed, so the whole status must match)."""
    return stack.status is not None and status_body(stack.status) == body


def waiting_shown(found: Sequence[Condition]) -> tuple[str, str]:
    """The Reconciling reason and message to show while the Workspace is applied: what is already shown when it
    is the Workspace's problem or its place in the pool's queue (so a reconcile does not flip it back to plain
    waiting and forth again), else the reference's plain text."""
    shown = conditions.find(found, conditions.RECONCILING)
    if shown is not None and shown.reason == conditions.QUEUED and shown.message:
        return conditions.QUEUED, shown.message
    if (shown is not None and shown.reason == conditions.RECONCILING_PROCESSING
            and (shown.message or "").startswith(conditions.MESSAGE_WAITING_FOR_WORKSPACE + ": ")):
        return conditions.RECONCILING_PROCESSING, shown.message or conditions.MESSAGE_WAITING_FOR_WORKSPACE
    return conditions.RECONCILING_PROCESSING, conditions.MESSAGE_WAITING_FOR_WORKSPACE


# --- 1. once a finished Update is absorbed ------------------------------------------------------------------


class Begin(enum.Enum):
    RELEASE = "release"  # deleting, and nothing to destroy: Ready, then the finalizer goes
    SUSPEND = "suspend"  # spec.suspend: report, start nothing
    INVALID = "invalid"  # spec.config is not an object: stalled until the spec changes
    FROM_STATUS = "from-status"  # a destroy that does not run the program: the project info in status is enough
    RESOLVE = "resolve"  # fetch the source (Git, Flux, Program)


CONFIG_INVALID_MESSAGE = "spec.config must be an object of config keys"


@dataclass(frozen=True)
class Entry:
    begin: Begin
    forget_drift: bool = False  # drift detection was removed from the spec: its status and condition go
    resumed: bool = False  # the Stack showed Suspended and no longer is (StackResumed)


def entry(stack: stack_api.Stack, status: stack_api.StackStatus, found: Sequence[Condition]) -> Entry:
    """The road of a pass once its current Update, if any, is absorbed and no drift check holds the Stack."""
    spec = stack_api.spec_of(stack)
    forget = spec.drift_detection is None and (status.drift is not None
                                               or conditions.find(found, conditions.DRIFTED) is not None)
    deleting = bool(stack.metadata.deletion_timestamp)
    destroys = ttl.destroys_on_finalize(stack) and not spec.preview
    if deleting and not destroys:
        return Entry(Begin.RELEASE, forget)
    if sync.is_suspended(stack):
        return Entry(Begin.SUSPEND, forget)
    resumed = sync.shows_suspended(found)
    if deleting and not spec.run_program and status.project_info is not None:
        return Entry(Begin.FROM_STATUS, forget, resumed)
    if not isinstance(spec.config, dict | None):
        return Entry(Begin.INVALID, forget, resumed)
    return Entry(Begin.RESOLVE, forget, resumed)


# --- 2. once the source and its Workspace are known ---------------------------------------------------------


class Next(enum.Enum):
    SYNCED = "synced"  # nothing to run: report the last result, requeue for the next resync or check
    CHECK = "check"  # a drift check is due (a preview; the Stack reads as synced meanwhile)
    UPDATE = "update"  # an update (or a destroy) is due


@dataclass(frozen=True)
class Due:
    next: Next
    message: str = ""  # UPDATE: why (the event StackUpdateDetected and the Update's spec.message)
    remediation: str | None = None  # a drift remediation is due: the message its Update carries
    #: SYNCED: when the next drift check is, or what keeps it from running
    schedule: drift.Plan = field(default_factory=drift.Plan)


def due(stack: stack_api.Stack, found: Sequence[Condition], commit: str, now: datetime.datetime, *,
        defaults: sync.RetryPolicy, min_resync: float, output_refs: Mapping[str, str] | None) -> Due:
    """What runs next for `stack` (its status the one being built) at `commit`: an update, a drift check, or
    nothing. `output_refs` are the digests of the values its `spec.outputRefs` read now (None: it has none)."""
    synced, message = sync.is_synced(stack, commit, now, defaults=defaults, min_resync=min_resync,
                                     output_refs=output_refs)
    remediation = drift.remediation_due(stack, found)
    if synced and remediation is not None:
        synced, message = False, remediation
    if not synced:
        return Due(Next.UPDATE, message, remediation)
    schedule = drift.plan(stack, now)
    if schedule.due:
        return Due(Next.CHECK, message, remediation, schedule)
    return Due(Next.SYNCED, message, remediation, schedule)


# --- 3. once the Workspace is applied -----------------------------------------------------------------------


class Then(enum.Enum):
    START = "start"  # the Workspace is ready: start the Update (or the drift check)
    WAIT = "wait"  # not ready yet: its watch brings the Stack back
    STALL = "stall"  # the Workspace failed: stalled, polling a branch for a commit that may fix it
    CHECK_FAILED = "check-failed"  # the Workspace of a drift check failed: the check is over, found nothing
    RELEASE = "release"  # deleting a Stack that never ran: nothing to destroy, the finalizer goes


@dataclass(frozen=True)
class Placed:
    then: Then
    reason: str = ""  # STALL: the Stalled reason
    message: str = ""  # STALL, CHECK_FAILED: what the Workspace said
    show_problem: bool = False  # WAIT: carry the Workspace's problem into Reconciling (not for a drift check)


def placed(ws: ws_api.Workspace, *, check: bool, deleting: bool, ever_updated: bool) -> Placed:
    """What the applied Workspace `ws` lets the pass do (`check`: it is for a drift check; `ever_updated`: the
    Stack has a last update)."""
    if workspace_ready(ws):
        return Placed(Then.START)
    stalled = conditions.find(ws.status.conditions if ws.status else None, conditions.STALLED)
    if stalled is None or stalled.status != "True":
        return Placed(Then.WAIT, show_problem=not check)
    said = f"{stalled.reason}: {stalled.message}"
    if check:
        return Placed(Then.CHECK_FAILED, message=f"the workspace failed: {said}")
    if deleting and not ever_updated:
        return Placed(Then.RELEASE)
    reason = (conditions.STALLED_PULUMI_VERSION_TOO_LOW if stalled.reason == "IncompatibleConfiguration"
              else conditions.STALLED_WORKSPACE_FAILED)
    return Placed(Then.STALL, reason, said)
