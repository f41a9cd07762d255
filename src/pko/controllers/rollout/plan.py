"""The StackRollout's rules — pure: from the rollout, the Stacks of its namespace, the gates' latest checks and the
time, what to patch, the new status, the events and when to look again.

Why one pure function: every decision of a rollout (which Stacks a wave takes, when the next Stack starts, when a
wave failed too often, when it has baked, when to roll back and when that is done) is a rule a platform team must
be able to trust, and each is tested here without a cluster. The executor (reconciler.py) only reads, runs the
gates this plan asks for, applies the patches and writes the status.

The life of a rollout:
- **start**: the Stacks its selector picks are split into waves (frozen in ``status.stacks``: relabelling a Stack
  later moves nothing); each is claimed with the ``pko.pulumi.com/rollout`` annotation. A Stack that another active
  rollout claims blocks the start (``Blocked``, ``StackInAnotherRollout``) until that one ends.
- **a wave**: up to ``maxConcurrent`` Stacks at once get the revision (a merge patch of their spec; the undo patch is
  kept); a Stack is done when it is Ready at that generation, failed when its update at that generation failed or it
  stalled. A Stack waiting for a StackApproval holds the wave and the rollout says so. More failures than
  ``maxFailureRate`` pause the wave (until they recover, or a promote lets it go on).
- **bake**: once every Stack of the wave is done, the gates are checked at once and every ``interval`` until the
  ``bake`` time has passed; the wave is complete when every gate's last check passed. ``failureLimit`` failed checks
  in a row of one gate roll back.
- **rollback** (a gate failed, or ``abort``): every Stack the rollout changed gets its undo patch; Stacks not started
  are skipped; later waves never start. The rollout ends ``RolledBack`` once they are all back (or failed back).
- **end**: ``Completed`` after the last wave; the claims are released either way.

Must never: read the clock or do I/O; change a Stack it did not claim; start a Stack while paused or after a
rollback began.
"""

from __future__ import annotations

import copy
import datetime
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pko.api import conditions, durations, names
from pko.api import rollout as api
from pko.api import stack as stack_api
from pko.api.meta import Condition
from pko.controllers.rollout import revision as revision_mod
from pko.kube import selectors

DEFAULT_GATE_INTERVAL = 30.0
DEFAULT_FAILURE_LIMIT = 3
POLL_PROGRESS = 5.0  # a wave in progress is looked at this often (Stacks of other shards send no wake-up)
POLL_WAITING = 30.0  # blocked or paused
MAX_STACKS = 2000  # what one rollout's status holds (each with its undo patch) well inside an object's size limit

EVENT_STARTED = "RolloutStarted"
EVENT_WAVE_STARTED = "RolloutWaveStarted"
EVENT_WAVE_COMPLETED = "RolloutWaveCompleted"
EVENT_WAITING_FOR_APPROVAL = "RolloutWaitingForApproval"
EVENT_PAUSED = "RolloutPaused"
EVENT_RESUMED = "RolloutResumed"
EVENT_PROMOTED = "RolloutPromoted"
EVENT_GATE_FAILED = "RolloutGateFailed"
EVENT_ROLLING_BACK = "RolloutRollingBack"
EVENT_ROLLED_BACK = "RolloutRolledBack"
EVENT_ROLLBACK_FAILED = "RolloutRollbackFailed"
EVENT_COMPLETED = "RolloutCompleted"
EVENT_BLOCKED = "RolloutBlocked"


@dataclass(frozen=True)
class StackView:
    """What the rollout reads of one Stack."""

    name: str
    labels: Mapping[str, str]
    generation: int
    spec: Mapping[str, Any]
    ready: bool  # Ready, at its current generation and reconcile request
    observed_generation: int
    last_update_state: str | None
    last_update_generation: int
    stalled: str | None  # the Stalled reason, when stalled
    awaiting_approval: bool  # a plan of its current generation awaits a StackApproval
    rollout: str | None  # the rollout that claims it (annotation)
    outputs: Mapping[str, Any]
    deleting: bool = False
    resource_version: str = ""
    suspended: bool = False


def view(obj: Mapping[str, Any]) -> StackView:
    """A Stack object (wire form) as the rollout reads it."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    found = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
    generation = int(meta.get("generation") or 0)
    observed = int(status.get("observedGeneration") or 0)
    annotations = meta.get("annotations") or {}
    stalled = found.get(conditions.STALLED) or {}
    last = status.get("lastUpdate") or {}
    approval = status.get("approval") or {}
    return StackView(
        name=str(meta.get("name", "")), labels=dict(meta.get("labels") or {}), generation=generation,
        spec=copy.deepcopy(dict(obj.get("spec") or {})), ready=stack_api.up_to_date(obj), observed_generation=observed,
        last_update_state=last.get("state"), last_update_generation=int(last.get("generation") or 0),
        stalled=str(stalled.get("reason") or "") if stalled.get("status") == "True" else None,
        awaiting_approval=(approval.get("state") == "AwaitingApproval"
                           and int(approval.get("generation") or 0) == generation),
        rollout=annotations.get(names.ANNOTATION_ROLLOUT), outputs=dict(status.get("outputs") or {}),
        deleting=bool(meta.get("deletionTimestamp")), resource_version=str(meta.get("resourceVersion") or ""),
        suspended=bool((obj.get("spec") or {}).get("suspend")),
    )


@dataclass(frozen=True)
class GateCheck:
    """One check of one gate: healthy or not, and what it saw (never a secret)."""

    healthy: bool
    message: str


@dataclass(frozen=True)
class StackPatch:
    """A merge patch of one Stack (applied after the status that records it is written)."""

    name: str
    patch: dict[str, Any]


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str


@dataclass
class Plan:
    status: api.StackRolloutStatus
    patches: list[StackPatch] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    #: the Reconciling reason of the last pass (what the rollout said it was waiting for), and of this one when it
    #: is not the phase's own (a pause for the failure rate, a wait for approvals)
    before: str | None = None
    reason: str | None = None

    def normal(self, reason: str, message: str) -> None:
        self.events.append(Event("Normal", reason, message))

    def warning(self, reason: str, message: str) -> None:
        self.events.append(Event("Warning", reason, message))

    def look_in(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)


# --- reading the spec ----------------------------------------------------------------------------------------------

def wave_name(spec: api.StackRolloutSpec, index: int) -> str:
    return spec.waves[index].name or f"wave-{index + 1}"


def _seconds(text: str | None, default: float) -> float:
    if not text:
        return default
    try:
        return durations.parse(text)
    except ValueError:
        return default


def gate_interval(gate: api.Gate) -> float:
    return _seconds(gate.interval, DEFAULT_GATE_INTERVAL)


def failure_limit(gate: api.Gate) -> int:
    return gate.failure_limit or DEFAULT_FAILURE_LIMIT


def assign(spec: api.StackRolloutSpec, stacks: Sequence[StackView]) -> tuple[list[api.RolloutStack], int]:
    """The selected Stacks split into waves (by name within a wave), and how many no wave takes."""
    chosen = selectors.of_label_selector(spec.selector)
    selected = sorted((s for s in stacks if chosen.matches(s.labels) and not s.deleting), key=lambda s: s.name)
    remaining = list(selected)
    assigned: list[api.RolloutStack] = []
    for index, wave in enumerate(spec.waves):
        if wave.selector is not None:
            in_wave = selectors.of_label_selector(wave.selector)
            taken = [s for s in remaining if in_wave.matches(s.labels)]
        else:
            taken = remaining[:math.ceil((wave.percent or 0) * len(selected) / 100)]
        names_taken = {s.name for s in taken}
        remaining = [s for s in remaining if s.name not in names_taken]
        assigned.extend(api.RolloutStack(name=s.name, wave=index, state=api.STACK_PENDING) for s in taken)
    return assigned, len(remaining)


# --- what a Stack's status says about the revision the rollout gave it -------------------------------------------
# A Stack is judged by its spec and status alone, never by a generation the rollout wrote down: the status is written
# before the patch (so the undo patch is never lost), and a patch lost to a crash is simply sent again.

def _done(stack: StackView, patch: Mapping[str, Any]) -> bool:
    return stack.ready and revision_mod.at(patch, stack.spec)


def _failed(stack: StackView, patch: Mapping[str, Any]) -> str | None:
    if not revision_mod.at(patch, stack.spec) or stack.ready:
        return None
    if stack.last_update_state == "failed" and stack.last_update_generation >= stack.generation:
        return "its update failed"
    if stack.stalled and stack.observed_generation >= stack.generation:
        return f"it stalled ({stack.stalled})"
    return None


# --- the plan ------------------------------------------------------------------------------------------------------

def plan(rollout: api.StackRollout, stacks: Sequence[StackView], *, active_rollouts: set[str],
         checks: Mapping[str, GateCheck], now: datetime.datetime, refused: Mapping[str, str] | None = None) -> Plan:
    """Everything the rollout does in this pass. `active_rollouts` are the names of the other StackRollouts of the
    namespace that have not ended; `checks` the gate checks the executor ran for this pass (see :func:`due_gates`);
    `refused` the Stacks whose last patch the API server refused for good, with its message."""
    spec = rollout.spec
    assert spec is not None  # the API server requires it
    status = (rollout.status or api.StackRolloutStatus()).model_copy(deep=True)
    status.observed_generation = rollout.metadata.generation
    said = conditions.find(status.conditions, conditions.RECONCILING)
    out = Plan(status, before=said.reason if said is not None else None)
    if status.phase in api.TERMINAL:
        return out
    if status.revision is not None:  # what the rollout started with is what it rolls out, whatever spec says now
        spec = spec.model_copy(update={"revision": status.revision})
    by_name = {s.name: s for s in stacks if not s.deleting}  # a Stack being deleted is as good as gone
    _refused(out, refused or {})
    name = rollout.metadata.name or ""
    if status.phase in (None, api.PENDING, api.BLOCKED) and spec.abort:
        status.phase, status.rollback_reason = api.ROLLED_BACK, api.REASON_ABORTED
        status.message, status.completed_at = "aborted (spec.abort) before it started", conditions.format_time(now)
        out.normal(EVENT_ROLLED_BACK, status.message)
        return _conditions(out, now)
    if status.phase in (None, api.PENDING, api.BLOCKED) and not _start(out, spec, name, stacks, active_rollouts,
                                                                        now):
        return _conditions(out, now)
    if spec.abort and status.phase != api.ROLLING_BACK:
        _begin_rollback(out, spec, by_name, api.REASON_ABORTED, "aborted (spec.abort)", now)
    if status.phase == api.ROLLING_BACK:
        _rolling_back(out, spec, name, by_name, now)
        return _conditions(out, now)
    _claims(out, spec, name, by_name, active_rollouts)
    _observe(out, spec, name, by_name)
    _gates(out, spec, checks, by_name, now)
    if status.phase == api.ROLLING_BACK:
        _rolling_back(out, spec, name, by_name, now)
        return _conditions(out, now)
    _advance(out, spec, rollout, name, by_name, now)
    return _conditions(out, now)


def _start(out: Plan, spec: api.StackRolloutSpec, name: str, stacks: Sequence[StackView], active: set[str],
           now: datetime.datetime) -> bool:
    status = out.status
    chosen = selectors.of_label_selector(spec.selector)
    selected = [s for s in stacks if chosen.matches(s.labels) and not s.deleting]
    taken = sorted(f"{s.name} ({s.rollout})" for s in selected if s.rollout and s.rollout != name
                   and s.rollout in active)
    if taken:
        message = (f"Stacks in another active StackRollout: {', '.join(taken)}; this rollout starts when they are "
                   "free (delete it to cancel)")
        if status.phase != api.BLOCKED or status.message != message:
            out.warning(EVENT_BLOCKED, message)
        status.phase, status.message = api.BLOCKED, message
        out.look_in(POLL_WAITING)
        return False
    assigned, unassigned = assign(spec, stacks)
    if len(assigned) > MAX_STACKS:
        message = (f"the selector and waves take {len(assigned)} Stacks; a rollout takes at most {MAX_STACKS}: "
                   "split it into several rollouts by label")
        if status.message != message:
            out.warning(EVENT_BLOCKED, message)
        status.phase, status.message = api.BLOCKED, message
        return False
    status.stacks, status.unassigned = assigned, unassigned
    status.revision = spec.revision
    status.waves = [api.WaveStatus(name=wave_name(spec, i), phase=api.WAVE_PENDING,
                                   stacks=sum(1 for s in assigned if s.wave == i)) for i in range(len(spec.waves))]
    status.started_at = conditions.format_time(now)
    status.current_wave = 0
    status.phase = api.PROGRESSING
    summary = revision_mod.summary(spec.revision)
    left = f"; {unassigned} selected Stacks are in no wave and stay as they are" if unassigned else ""
    out.normal(EVENT_STARTED, f"rolling out {summary} to {len(assigned)} Stacks in {len(spec.waves)} waves{left}")
    by_name = {s.name: s for s in stacks}
    for stack in assigned:
        out.patches.append(_claim(by_name[stack.name], name))
    return True


def _claim(stack: StackView, rollout: str) -> StackPatch:
    """Claim `stack` for `rollout` only if nobody changed it since it was read (the resourceVersion precondition):
    of two rollouts that claim one Stack at once, one wins."""
    return StackPatch(stack.name, {"metadata": {"resourceVersion": stack.resource_version,
                                                "annotations": {names.ANNOTATION_ROLLOUT: rollout}}})


def _claims(out: Plan, spec: api.StackRolloutSpec, name: str, by_name: Mapping[str, StackView],
            active: set[str]) -> None:
    """Keep the claims of the Stacks still to change: send a claim that was lost again; a Stack another active
    rollout holds is left to it."""
    planned = {p.name for p in out.patches}
    for entry in out.status.stacks or []:
        if entry.state not in (api.STACK_PENDING, api.STACK_UPDATING, api.STACK_FAILED):
            continue
        stack = by_name.get(entry.name)
        if stack is None or stack.name in planned:
            continue
        if stack.rollout is None or (stack.rollout != name and stack.rollout not in active):
            out.patches.append(_claim(stack, name))
        elif stack.rollout != name and (entry.state == api.STACK_PENDING or not revision_mod.at(
                revision_mod.change(spec.revision, stack.spec).forward, stack.spec)):
            # another rollout won it before this one changed it
            entry.state, entry.message = api.STACK_SKIPPED, f"claimed by StackRollout {stack.rollout}"


def _refused(out: Plan, refused: Mapping[str, str]) -> None:
    """A change the API server refused for good (invalid, forbidden) fails the Stack instead of being sent again
    for ever."""
    for entry in out.status.stacks or []:
        message = refused.get(entry.name)
        if message is None:
            continue
        if entry.state == api.STACK_UPDATING:
            entry.state, entry.message = api.STACK_FAILED, f"the API server refused the change: {message}"
        elif entry.state == api.STACK_ROLLING_BACK:
            entry.state, entry.message = api.STACK_ROLLBACK_FAILED, f"the API server refused the undo: {message}"


def _observe(out: Plan, spec: api.StackRolloutSpec, name: str, by_name: Mapping[str, StackView]) -> None:
    """Move the Stacks in flight to Succeeded or Failed as their status says (a failed Stack that recovers by its
    own retries counts as succeeded); a Stack whose spec lost the revision (a patch lost to a crash) gets it
    again."""
    for entry in out.status.stacks or []:
        if entry.state not in (api.STACK_UPDATING, api.STACK_FAILED):
            continue
        stack = by_name.get(entry.name)
        if stack is None:
            entry.state, entry.message = api.STACK_SKIPPED, "the Stack is gone"
            continue
        forward = revision_mod.change(spec.revision, stack.spec).forward
        if not revision_mod.at(forward, stack.spec):
            if entry.state == api.STACK_FAILED:  # refused, or changed back by hand after it failed: left so
                continue
            if stack.rollout in (None, name):  # a patch lost to a crash (or undone by hand): sent again
                _put_forward(out, stack, name, forward)
            entry.state, entry.message = api.STACK_UPDATING, None
            continue
        entry.generation = stack.generation
        if _done(stack, forward):
            entry.state, entry.message = api.STACK_SUCCEEDED, None
        elif (why := _failed(stack, forward)) is not None:
            entry.state, entry.message = api.STACK_FAILED, why
        elif stack.awaiting_approval:
            entry.message = "waiting for a StackApproval"
        else:
            entry.message = None


def _forward_patch(stack: str, rollout: str, forward: dict[str, Any]) -> StackPatch:
    return StackPatch(stack, {"metadata": {"annotations": {names.ANNOTATION_ROLLOUT: rollout}}, "spec": forward})


def _put_forward(out: Plan, stack: StackView, rollout: str, forward: dict[str, Any]) -> None:
    """Change a Stack this rollout holds; one it has not got yet is claimed and changed in one patch, only if nobody
    changed it since it was read (a claim planned in this pass gives way to it)."""
    patch = _forward_patch(stack.name, rollout, forward)
    if stack.rollout != rollout:
        out.patches = [p for p in out.patches if p.name != stack.name]
        patch.patch["metadata"]["resourceVersion"] = stack.resource_version
    out.patches.append(patch)


def _wave_entries(status: api.StackRolloutStatus, wave: int) -> list[api.RolloutStack]:
    return [s for s in status.stacks or [] if s.wave == wave]


def _count(entries: Sequence[api.RolloutStack], *states: str) -> int:
    return sum(1 for s in entries if s.state in states)


def _advance(out: Plan, spec: api.StackRolloutSpec, rollout: api.StackRollout, name: str,
             by_name: Mapping[str, StackView], now: datetime.datetime) -> None:
    status = out.status
    promote = (rollout.metadata.annotations or {}).get(names.ANNOTATION_ROLLOUT_PROMOTE)
    promoted = bool(promote) and promote != status.promoted
    if promoted:
        status.promoted = promote
    while status.current_wave is not None and status.current_wave < len(spec.waves):
        index = status.current_wave
        wave = (status.waves or [])[index]
        entries = _wave_entries(status, index)
        label = wave_name(spec, index)
        if wave.phase == api.WAVE_PENDING:
            wave.phase, wave.started_at = api.WAVE_PROGRESSING, conditions.format_time(now)
            out.normal(EVENT_WAVE_STARTED, f"wave {label}: {len(entries)} Stacks")
        if promoted:  # a promote acts on the state it was sent in, once
            promoted = False
            if wave.phase == api.WAVE_BAKING:
                wave.bake_promoted = True
                out.normal(EVENT_PROMOTED, f"wave {label} promoted: its bake ends once its gates pass")
            elif status.phase == api.PAUSED and out.before == api.REASON_FAILURE_RATE:
                wave.promoted = True
                out.normal(EVENT_PROMOTED, f"wave {label} promoted: its failures no longer pause it")
            else:
                out.normal(EVENT_PROMOTED, f"nothing to promote: wave {label} is neither baking nor paused by its "
                                           "failure rate")
        if not entries and wave.phase == api.WAVE_PROGRESSING:  # an empty wave has nothing to bake or check
            wave.phase, wave.completed_at = api.WAVE_SUCCEEDED, conditions.format_time(now)
            out.normal(EVENT_WAVE_COMPLETED, f"wave {label}: no Stack")
            status.current_wave = index + 1
            continue
        wave.succeeded = _count(entries, api.STACK_SUCCEEDED)
        wave.failed = _count(entries, api.STACK_FAILED)
        if wave.phase == api.WAVE_PROGRESSING and not _progress(out, spec, index, entries, name, by_name, now):
            return
        if wave.phase == api.WAVE_PROGRESSING:  # every Stack of the wave is done: bake
            wave.phase, wave.bake_started_at = api.WAVE_BAKING, conditions.format_time(now)
            status.gates = [api.GateStatus(name=g.name, result=api.GATE_UNKNOWN) for g in spec.gates or []]
            status.phase = api.BAKING
            status.message = f"wave {label} is at the revision: baking"
            out.look_in(0)  # check the gates now
            return
        if not _baked(out, spec, wave, label, now):
            return
        wave.phase, wave.completed_at = api.WAVE_SUCCEEDED, conditions.format_time(now)
        out.normal(EVENT_WAVE_COMPLETED, f"wave {label}: {wave.succeeded} of {len(entries)} Stacks at the revision"
                   + (f", {wave.failed} failed" if wave.failed else "") + (", gates passed" if spec.gates else ""))
        status.current_wave = index + 1
        status.phase = api.PROGRESSING
    _complete(out, spec, now)
    _release(out, name, by_name)


def _progress(out: Plan, spec: api.StackRolloutSpec, index: int, entries: list[api.RolloutStack], name: str,
              by_name: Mapping[str, StackView], now: datetime.datetime) -> bool:
    """Start what the wave may start; True when every Stack of the wave is done (succeeded, or failed within the
    failure rate)."""
    status = out.status
    wave_spec = spec.waves[index]
    wave = (status.waves or [])[index]
    label = wave_name(spec, index)
    rate_limit = spec.max_failure_rate or 0
    failed = _count(entries, api.STACK_FAILED)
    over = bool(entries) and failed * 100 > rate_limit * len(entries) and not wave.promoted
    was_over = status.phase == api.PAUSED and out.before == api.REASON_FAILURE_RATE
    if over:
        message = (f"failure rate {failed}/{len(entries)} in wave {label} is over maxFailureRate {rate_limit}%: "
                   "paused (it goes on when the failed Stacks recover, or on promote; abort rolls back)")
        if not was_over:
            out.warning(EVENT_PAUSED, message + ": " + ", ".join(
                f"{s.name}: {s.message}" for s in entries if s.state == api.STACK_FAILED))
        status.phase, status.message, out.reason = api.PAUSED, message, api.REASON_FAILURE_RATE
        out.look_in(POLL_WAITING)
        return False
    if was_over:
        out.normal(EVENT_RESUMED, f"wave {label}: the failure rate is back under maxFailureRate")
    if spec.paused:
        if status.phase != api.PAUSED:
            out.normal(EVENT_PAUSED, f"paused by spec.paused in wave {label}")
        status.phase, status.message = api.PAUSED, f"paused (spec.paused) in wave {label}"
        out.look_in(POLL_WAITING)
        return False
    if status.phase == api.PAUSED:
        out.normal(EVENT_RESUMED, f"resumed in wave {label}")
    status.phase = api.PROGRESSING
    in_flight = _count(entries, api.STACK_UPDATING)
    room = (wave_spec.max_concurrent or len(entries)) - in_flight
    for entry in status.stacks or []:
        if room <= 0:
            break
        if entry.wave != index or entry.state != api.STACK_PENDING:
            continue
        stack = by_name.get(entry.name)
        if stack is None:
            entry.state, entry.message = api.STACK_SKIPPED, "the Stack is gone"
            continue
        change = revision_mod.change(spec.revision, stack.spec)
        entry.previous = change.undo
        entry.state, entry.message = api.STACK_UPDATING, None
        entry.generation = stack.generation
        _put_forward(out, stack, name, change.forward)
        room -= 1
    # awaiting an approval of the revision's plan: not one of an older spec, nor a Stack changed in this very pass
    waiting = [s.name for s in entries if s.state == api.STACK_UPDATING and s.name in by_name
               and by_name[s.name].awaiting_approval
               and revision_mod.at(revision_mod.change(spec.revision, by_name[s.name].spec).forward,
                                   by_name[s.name].spec)]
    updating = _count(entries, api.STACK_UPDATING)
    pending = _count(entries, api.STACK_PENDING)
    if updating or pending:
        if waiting:
            message = f"wave {label} waits for StackApprovals of {', '.join(waiting)}"
            if out.before != api.REASON_WAITING_FOR_APPROVAL:
                out.normal(EVENT_WAITING_FOR_APPROVAL, message)
            out.reason = api.REASON_WAITING_FOR_APPROVAL
        else:
            message = (f"wave {label}: {_count(entries, api.STACK_SUCCEEDED)} of {len(entries)} Stacks at the "
                       f"revision, {updating} updating, {pending} pending")
        status.message = message
        out.look_in(POLL_PROGRESS)
        return False
    return True


def _baked(out: Plan, spec: api.StackRolloutSpec, wave: api.WaveStatus, label: str, now: datetime.datetime) -> bool:
    """Whether the wave has baked: its bake time has passed (or a promote ended it) and every gate's last check
    passed; otherwise when to look again."""
    status = out.status
    started = conditions.parse_time(wave.bake_started_at) or now
    bake_end = started + datetime.timedelta(seconds=_seconds(spec.waves[status.current_wave or 0].bake, 0.0))
    gates = {g.name: g for g in status.gates or []}
    unchecked = [g.name for g in spec.gates or [] if (gates.get(g.name) or api.GateStatus(
        name=g.name, result=api.GATE_UNKNOWN)).result != api.GATE_PASSED]
    if spec.paused:
        status.phase, status.message = api.PAUSED, f"paused (spec.paused) while wave {label} bakes"
    else:
        status.phase = api.BAKING
    if (now >= bake_end or wave.bake_promoted) and not unchecked and not spec.paused:
        return True
    if unchecked:
        status.message = f"wave {label} bakes; waiting for the gates {', '.join(unchecked)} to pass"
    elif not spec.paused:
        status.message = f"wave {label} bakes until {conditions.format_time(bake_end)}"
    out.look_in((bake_end - now).total_seconds() if now < bake_end else POLL_WAITING)
    for gate in spec.gates or []:
        last = conditions.parse_time((gates.get(gate.name) or api.GateStatus(name=gate.name, result="")).last_checked)
        due = 0.0 if last is None else (last + datetime.timedelta(seconds=gate_interval(gate)) - now).total_seconds()
        out.look_in(due)
    return False


def due_gates(rollout: api.StackRollout, now: datetime.datetime) -> list[api.Gate]:
    """The gates to check in this pass: while a wave bakes, those never checked in this bake or last checked an
    interval ago."""
    spec, status = rollout.spec, rollout.status
    if spec is None or status is None or status.phase not in (api.BAKING, api.PAUSED) or not spec.gates:
        return []
    waves = status.waves or []
    if status.current_wave is None or status.current_wave >= len(waves) or \
            waves[status.current_wave].phase != api.WAVE_BAKING:
        return []
    found = {g.name: g for g in status.gates or []}
    due = []
    for gate in spec.gates:
        last = conditions.parse_time(found[gate.name].last_checked) if gate.name in found else None
        if last is None or (now - last).total_seconds() >= gate_interval(gate):
            due.append(gate)
    return due


def _gates(out: Plan, spec: api.StackRolloutSpec, checks: Mapping[str, GateCheck],
           by_name: Mapping[str, StackView], now: datetime.datetime) -> None:
    """Record this pass's checks; a gate with failureLimit failed checks in a row starts the rollback."""
    if not checks:
        return
    status = out.status
    found = {g.name: g for g in status.gates or []}
    for gate in spec.gates or []:
        check = checks.get(gate.name)
        entry = found.get(gate.name)
        if check is None or entry is None:
            continue
        entry.last_checked = conditions.format_time(now)
        entry.message = check.message
        if check.healthy:
            entry.result, entry.failures = api.GATE_PASSED, 0
            continue
        entry.failures = (entry.failures or 0) + 1
        entry.result = api.GATE_FAILED
        if entry.failures >= failure_limit(gate):
            label = wave_name(spec, status.current_wave or 0)
            why = f"gate {gate.name} failed {entry.failures} checks in a row in wave {label}: {check.message}"
            out.warning(EVENT_GATE_FAILED, why)
            _begin_rollback(out, spec, by_name, api.REASON_GATE_FAILED, why, now)
            return


def _begin_rollback(out: Plan, spec: api.StackRolloutSpec, by_name: Mapping[str, StackView], reason: str,
                    why: str, now: datetime.datetime) -> None:
    status = out.status
    status.phase = api.ROLLING_BACK
    status.message = f"rolling back: {why}"
    out.patches = [p for p in out.patches if "spec" not in p.patch]  # no forward change goes out any more
    back = []
    for entry in status.stacks or []:
        if entry.state == api.STACK_PENDING or entry.previous is None:
            entry.state, entry.message = api.STACK_SKIPPED, "not started before the rollback"
            continue
        if entry.state not in (api.STACK_UPDATING, api.STACK_SUCCEEDED, api.STACK_FAILED):
            continue
        stack = by_name.get(entry.name)
        if stack is None:
            entry.state, entry.message = api.STACK_SKIPPED, "the Stack is gone"
            continue
        entry.state, entry.message = api.STACK_ROLLING_BACK, None
        entry.generation = stack.generation
        out.patches.append(StackPatch(entry.name, {"spec": entry.previous}))
        back.append(entry.name)
    for wave in status.waves or []:
        if wave.phase == api.WAVE_PENDING:
            wave.phase = api.WAVE_SKIPPED
        elif wave.phase in (api.WAVE_PROGRESSING, api.WAVE_BAKING, api.WAVE_SUCCEEDED):
            wave.phase = api.WAVE_ROLLED_BACK
            wave.completed_at = conditions.format_time(now)
    status.rollback_reason = reason
    out.warning(EVENT_ROLLING_BACK, f"{why}; rolling back {len(back)} Stacks"
                + (f" ({', '.join(back)})" if back and len(back) <= 20 else "")
                + " to their previous revision; later waves never start")


def _rolling_back(out: Plan, spec: api.StackRolloutSpec, name: str, by_name: Mapping[str, StackView],
                  now: datetime.datetime) -> None:
    status = out.status
    rolling = 0
    for entry in status.stacks or []:
        if entry.state != api.STACK_ROLLING_BACK or not isinstance(entry.previous, dict):
            continue
        stack = by_name.get(entry.name)
        if stack is None:
            entry.state, entry.message = api.STACK_SKIPPED, "the Stack is gone"
        elif not revision_mod.at(entry.previous, stack.spec):
            if entry.name not in {p.name for p in out.patches}:  # not sent in this pass: lost to a crash
                out.patches.append(StackPatch(entry.name, {"spec": entry.previous}))
            rolling += 1
        elif _done(stack, entry.previous):
            entry.state, entry.message, entry.generation = api.STACK_ROLLED_BACK, None, stack.generation
        elif stack.suspended:
            entry.state, entry.generation = api.STACK_ROLLED_BACK, stack.generation
            entry.message = "spec restored; the Stack is suspended, so its update waits until it is resumed"
        elif (why := _failed(stack, entry.previous)) is not None:
            entry.state, entry.message = api.STACK_ROLLBACK_FAILED, why
        else:
            entry.message = "waiting for a StackApproval of the rollback's plan" if stack.awaiting_approval else None
            rolling += 1
    if rolling:
        out.look_in(POLL_PROGRESS)
        return
    failed = [s for s in status.stacks or [] if s.state == api.STACK_ROLLBACK_FAILED]
    back = _count(status.stacks or [], api.STACK_ROLLED_BACK)
    status.phase, status.completed_at = api.ROLLED_BACK, conditions.format_time(now)
    cause = (status.message or "").removeprefix("rolling back: ")
    status.message = f"rolled back ({cause}): {back} Stacks at their previous revision" + (
        f", {len(failed)} failed to roll back: {', '.join(f'{s.name} ({s.message})' for s in failed)}"
        if failed else "")
    if failed:
        out.warning(EVENT_ROLLBACK_FAILED, status.message)
    else:
        out.normal(EVENT_ROLLED_BACK, status.message)
    _release(out, name, by_name)


def _complete(out: Plan, spec: api.StackRolloutSpec, now: datetime.datetime) -> None:
    status = out.status
    entries = status.stacks or []
    status.phase, status.completed_at = api.COMPLETED, conditions.format_time(now)
    status.current_wave = len(spec.waves) - 1 if spec.waves else None
    failed = _count(entries, api.STACK_FAILED)
    status.message = (f"{_count(entries, api.STACK_SUCCEEDED)} of {len(entries)} Stacks at "
                      f"{revision_mod.summary(spec.revision)}" + (f", {failed} failed" if failed else "")
                      + (f", {status.unassigned} left alone" if status.unassigned else ""))
    if not entries:
        status.message = "no Stack matches the selector: nothing to roll out"
        status.current_wave = None
    out.normal(EVENT_COMPLETED, status.message)


def _release(out: Plan, name: str, by_name: Mapping[str, StackView]) -> None:
    for entry in out.status.stacks or []:
        stack = by_name.get(entry.name)
        if stack is not None and stack.rollout == name:
            out.patches.append(StackPatch(entry.name, {"metadata": {"annotations": {names.ANNOTATION_ROLLOUT: None}}}))


def _conditions(out: Plan, now: datetime.datetime) -> Plan:
    status = out.status
    found: list[Condition] = list(status.conditions or [])
    message = status.message or ""
    if status.phase == api.COMPLETED:
        reason = api.REASON_NO_STACKS if not status.stacks else api.REASON_COMPLETED
        found = conditions.mark_ready(found, now=now)
        found = conditions.set_condition(found, conditions.READY, "True", reason, message, now=now)
    elif status.phase == api.ROLLED_BACK:
        failed = any(s.state == api.STACK_ROLLBACK_FAILED for s in status.stacks or [])
        reason = api.REASON_ROLLBACK_FAILED if failed else api.REASON_ROLLED_BACK
        found = conditions.mark_stalled(found, status.rollback_reason or reason, message, now=now)
        found = conditions.set_condition(found, conditions.READY, "False", reason, message, now=now)
    else:
        reason = out.reason or {
            api.BLOCKED: api.REASON_CONFLICT, api.BAKING: api.REASON_BAKING, api.PAUSED: api.REASON_PAUSED,
            api.ROLLING_BACK: status.rollback_reason or api.REASON_GATE_FAILED,
        }.get(status.phase or "", api.REASON_WAVE_PROGRESSING)
        found = conditions.mark_reconciling(found, reason, message, now=now)
        found = conditions.set_condition(found, conditions.READY, "False", reason, message, now=now)
    status.conditions = found
    return out
