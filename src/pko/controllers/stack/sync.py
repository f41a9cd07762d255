"""When a Stack needs an update, and what its status says about the last one — pure rules of pko-v2 §3.1.

`is_synced` decides whether to start an update (and with which message); `cooldown` is the failed-update
backoff (`10s·3ⁿ`, capped); `record_failure` / `record_success` turn a finished Update into `status.lastUpdate`;
`mark_result` sets the kstatus conditions; `requeue_after` says when to look again (`next_retry_at`: when a failed
update is retried, which `kubectl pko get` shows); `prerequisite_problem` checks another Stack against a requirement.

pko additions, inert unless configured: the failure policy (:class:`RetryPolicy`: failures before Stalled, backoff
base and factor, cap, and an automatic retry of a Stalled Stack) comes from operator flags and a Stack's
`spec.retryPolicy`; with neither it is the reference's hard-coded 3 / 10s / 3 / 24h / never. `spec.suspend`
(:func:`is_suspended`, :func:`mark_suspended`) stops new updates and says so in the conditions.
The floor under `resyncFrequencySeconds` (resync and branch polling) is the operator's `--min-resync-frequency`,
by default the reference's fixed 60s.

Must never: read the clock or do I/O (callers pass `now` and the observed objects).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pko.api import conditions, durations, lanes, names
from pko.api import stack as stack_api
from pko.api import update as up_api
from pko.api.meta import Condition
from pko.controllers.stack import outputrefs, ttl
from pko.protocol import notices, transient

MAX_UPDATE_FAILURES = 3
NEVER_STALLS = 2**62  # a failure count no Stack reaches
BASE_BACKOFF = 10.0
BACKOFF_FACTOR = 3.0
DEFAULT_BACKOFF_CAP = 24 * 3600.0
MIN_RESYNC = 60.0
SECRET_MASK = "[secret]"


@dataclass(frozen=True)
class RetryPolicy:
    """The failure policy: a failed update is retried after `backoff_base · backoff_factorⁿ` seconds (n: the
    failures counted in `lastUpdate.failures`), at most `max_backoff`; once `max_failures` are counted the Stack is
    Stalled and, when `stalled_retry_interval` is set (> 0), retried that long after its last failure anyway."""

    max_failures: int = MAX_UPDATE_FAILURES
    backoff_base: float = BASE_BACKOFF
    backoff_factor: float = BACKOFF_FACTOR
    max_backoff: float = DEFAULT_BACKOFF_CAP
    stalled_retry_interval: float = 0.0  # 0: a Stalled Stack waits for a change of spec or source (the reference)

    def backoff(self, failures: int) -> float:
        """Seconds to wait after a failure with `failures` counted (the counter grows past the limit while
        stalled retries run, so the power may overflow: it is capped, never an error)."""
        try:
            wait = self.backoff_base * self.backoff_factor ** failures
        except OverflowError:
            wait = math.inf
        return min(wait, self.max_backoff)


DEFAULT_POLICY = RetryPolicy()


def policy_for(spec: stack_api.StackSpec, defaults: RetryPolicy = DEFAULT_POLICY) -> RetryPolicy:
    """The policy for one Stack: each field its `spec.retryPolicy` sets (and the cap
    `retryMaxBackoffDurationSeconds`, as in the reference) over the operator-wide `defaults`."""
    own = spec.retry_policy or stack_api.RetryPolicy()
    return RetryPolicy(
        max_failures=defaults.max_failures if own.max_failures is None else own.max_failures,
        backoff_base=float(own.backoff_base_seconds or 0) or defaults.backoff_base,
        backoff_factor=float(own.backoff_factor or 0) or defaults.backoff_factor,
        max_backoff=float(spec.retry_max_backoff_duration_seconds or 0) or defaults.max_backoff,
        stalled_retry_interval=(defaults.stalled_retry_interval if own.stalled_retry_interval_seconds is None
                                else float(own.stalled_retry_interval_seconds)),
    )


def _policy(spec: stack_api.StackSpec, default_cap: float | None, defaults: RetryPolicy) -> RetryPolicy:
    """`default_cap` is the older way to give only the operator-wide cap; it wins over `defaults.max_backoff`."""
    if default_cap is not None:
        defaults = dataclasses.replace(defaults, max_backoff=default_cap)
    return policy_for(spec, defaults)


def stack_policy(stack: stack_api.Stack, default_cap: float | None = None, *,
                 defaults: RetryPolicy = DEFAULT_POLICY) -> RetryPolicy:
    """The policy for one Stack (:func:`policy_for`). pko: the destroy of a Stack whose TTL passed (docs/ttl.md)
    never stalls; it is retried with the Stack's backoff until it succeeds, as nobody may be there to retry a
    review environment by hand."""
    policy = _policy(stack_api.spec_of(stack), default_cap, defaults)
    if stack.metadata.deletion_timestamp is not None and ttl.marked(stack):
        return dataclasses.replace(policy, max_failures=NEVER_STALLS)
    return policy


def stalled(last: stack_api.StackUpdateState | None, policy: RetryPolicy) -> bool:
    """Too many failures counted: no backoff retry, only a change (or the stalled retry, when on). pko: a last
    failure that was a passing backend or network error (:mod:`pko.protocol.transient`) never stalls; it is retried
    with the same backoff, so a fleet outlives an outage of its backend without a person."""
    return (last is not None and last.state == stack_api.STATE_FAILED and (last.failures or 0) >= policy.max_failures
            and not transient.is_transient(None, last.message or ""))


def reconcile_request(stack: stack_api.Stack) -> str:
    return (stack.metadata.annotations or {}).get(names.ANNOTATION_RECONCILE_REQUEST, "")


def resync_frequency(spec: stack_api.StackSpec, minimum: float = MIN_RESYNC) -> float:
    """The Stack's resync period and branch poll interval: its `resyncFrequencySeconds`, never below `minimum` (the
    operator's `--min-resync-frequency`; the reference's fixed 60s)."""
    return max(float(spec.resync_frequency_seconds or 0), minimum)


def cooldown(spec: stack_api.StackSpec, last: stack_api.StackUpdateState | None,
             default_cap: float | None = None, *, defaults: RetryPolicy = DEFAULT_POLICY) -> float:
    """Seconds to wait before retrying a failed update: 10s, 30s, 90s, ... capped by the Stack's
    `retryMaxBackoffDurationSeconds`, else by the operator-wide cap (`--retry-max-backoff`, default 24h); base and
    factor from the Stack's `retryPolicy`, else the operator's."""
    if last is None or last.state != stack_api.STATE_FAILED:
        return 0.0
    return _policy(spec, default_cap, defaults).backoff(last.failures or 0)


def is_synced(stack: stack_api.Stack, commit: str, now: datetime.datetime,
              default_cap: float | None = None, *, defaults: RetryPolicy = DEFAULT_POLICY,
              min_resync: float = MIN_RESYNC, output_refs: Mapping[str, str] | None = None) -> tuple[bool, str]:
    """(synced, message): when not synced, the message says why an update is needed (it becomes the event
    `StackUpdateDetected` and the Update's `spec.message`). pko: `output_refs` are the digests of the values the
    Stack's `spec.outputRefs` read now (None: it has none); a value that differs from the last update's is due an
    update, as a new commit is (docs/stack-dependencies.md)."""
    status = stack.status or stack_api.StackStatus()
    spec = stack_api.spec_of(stack)
    last = status.last_update
    deleting = stack.metadata.deletion_timestamp is not None
    if last is None:
        return False, "Initial stack update"
    if last.generation != stack.metadata.generation:
        return False, "Stack marked for deletion" if deleting else f"New stack generation: {stack.metadata.generation}"
    request = reconcile_request(stack)
    if (last.reconcile_request or "") != request:
        return False, f"Sync request: {json.dumps(request)}"
    if output_refs is not None and not deleting:
        differ = outputrefs.changed(last.output_refs, output_refs)
        if differ:
            return False, f"{outputrefs.CHANGED_MESSAGE}: {', '.join(differ)}"
    elapsed = (now - (conditions.parse_time(last.last_resync_time) or now)).total_seconds()
    if last.state == stack_api.STATE_SUCCEEDED:
        if deleting:
            return (True, "") if last.type == up_api.DESTROY else (False, "Stack marked for deletion")
        if (last.last_successful_commit or "") != commit:
            return False, f"New commit detected: {json.dumps(commit)}"
        if not spec.continue_resync_on_commit_match:
            return True, ""
        frequency = resync_frequency(spec, min_resync)
        if elapsed >= frequency:
            return False, f"{lanes.RESYNC_ELAPSED}: {durations.format_seconds(frequency)}"
        return True, ""
    if last.state == stack_api.STATE_FAILED:
        if (last.last_attempted_commit or "") != commit:
            return False, f"New commit detected: {json.dumps(commit)}"
        policy = stack_policy(stack, default_cap, defaults=defaults)
        if stalled(last, policy):
            interval = policy.stalled_retry_interval
            if interval > 0 and elapsed >= interval:
                return False, f"{lanes.STALLED_RETRY_ELAPSED}: {durations.format_seconds(interval)}"
            return True, ""
        wait = policy.backoff(last.failures or 0)
        if elapsed >= wait:
            return False, f"{lanes.BACKOFF_ELAPSED}: {durations.format_seconds(wait)}"
        return True, ""
    return True, ""


#: How long after it was named a current Update that the API server does not have counts as never created.
LOST_UPDATE_GRACE = 30.0


def lost_update_wait(stack_name: str, update: str, now: datetime.datetime,
                     grace: float = LOST_UPDATE_GRACE) -> float:
    """Seconds to wait before a current Update that does not exist is given up (0: give it up now).

    The Stack's status names its Update before the Update is created, so that a crash never loses track of one;
    a crash, an API outage or a lost Lease between the two leaves a name with no object (the Go operator then waits
    for it for ever). The Stack holds a finalizer on its Updates until it has absorbed them, so an Update that the
    API server does not have was never created — unless its creation is still on its way from a leader that has
    just handed over, which `grace` after its naming rules out."""
    named = names.update_name_millis(stack_name, update)
    if named is None:
        return 0.0
    return max(0.0, named / 1000 + grace - now.timestamp())


def mark_result(found: Sequence[Condition] | None, last: stack_api.StackUpdateState,
                now: datetime.datetime, *, policy: RetryPolicy = DEFAULT_POLICY) -> list[Condition]:
    """The conditions after a synced check: Ready, or retrying, or stalled after too many failures (the message
    names the automatic retry when one is scheduled)."""
    if last.state == stack_api.STATE_SUCCEEDED:
        return conditions.mark_ready(found, now=now)
    failures = last.failures or 0
    if stalled(last, policy):
        if policy.stalled_retry_interval > 0:
            message = conditions.update_failed_retry_message(last.type or "", failures,
                                                             durations.format_seconds(policy.stalled_retry_interval))
        else:
            message = conditions.update_failed_message(last.type or "", failures)
        return conditions.mark_stalled(found, conditions.STALLED_UPDATE_FAILED, message, now=now)
    if last.type == up_api.PREVIEW:
        return conditions.mark_reconciling(found, conditions.RECONCILING_PREVIEW_FAILED,
                                           conditions.preview_failed_message(failures), now=now)
    return conditions.mark_reconciling(found, conditions.RECONCILING_RETRY,
                                       conditions.retrying_message(failures), now=now)


def record_failure(current: stack_api.CurrentStackUpdate, update: up_api.Update,
                   last: stack_api.StackUpdateState | None, now: datetime.datetime) -> stack_api.StackUpdateState:
    """`lastUpdate` after a failed Update (failures count up only for the same generation and request)."""
    status = update.status or up_api.UpdateStatus()
    same_inputs = (last is not None and last.generation == current.generation
                   and (last.reconcile_request or "") == (current.reconcile_request or ""))
    return stack_api.StackUpdateState(
        generation=current.generation, reconcile_request=current.reconcile_request or None, name=update.metadata.name,
        type=update.spec.type if update.spec else None, state=stack_api.STATE_FAILED, message=status.message or None,
        last_attempted_commit=current.commit, last_successful_commit=last.last_successful_commit if last else None,
        permalink=status.permalink or None, last_resync_time=conditions.format_time(now),
        # zero is left out, as the Go operator's `omitempty` leaves it out
        failures=((last.failures or 0) + 1) if same_inputs and last is not None else None,
        resource_changes=status.resource_changes or None,  # never {}: see below
        output_refs=current.output_refs or None,  # never {}, as resourceChanges
    )


# An empty `resourceChanges` is left out, never written as {}: server-side apply of {} over a map this field manager
# filled before leaves `null` behind, which the schema refuses (every later status write of the Stack then failed).


def record_success(current: stack_api.CurrentStackUpdate, update: up_api.Update,
                   now: datetime.datetime) -> stack_api.StackUpdateState:
    status = update.status or up_api.UpdateStatus()
    return stack_api.StackUpdateState(
        generation=current.generation, reconcile_request=current.reconcile_request or None, name=update.metadata.name,
        type=update.spec.type if update.spec else None, state=stack_api.STATE_SUCCEEDED,
        message=stale_lock_lines(status.message),  # pko: None unless the agent released a stale lock (PKO#736)
        last_attempted_commit=current.commit, last_successful_commit=current.commit,
        permalink=status.permalink or None, last_resync_time=conditions.format_time(now),
        resource_changes=status.resource_changes or None,  # never {}: see below
        output_refs=current.output_refs or None,  # never {}, as resourceChanges
    )


def stale_lock_lines(message: str | None) -> str | None:
    """The lines of an Update's status message that say the agent released a stale lock (pko.protocol.notices)."""
    lines = [line for line in (message or "").splitlines() if line.startswith(notices.STALE_LOCK_RELEASED)]
    return "\n".join(lines) or None


def update_event_message(update: up_api.Update, failed: bool) -> str:
    """The StackCreated/StackUpdateFailure event for a finished Update: the reference's message, then the change
    summary when the Update reported one (pko: "Successfully updated stack: 3 created, 1 updated, 0 deleted",
    "Failed to update stack (0 created, 1 updated, 0 deleted): <error>")."""
    status = update.status or up_api.UpdateStatus()
    changes = status.resource_changes
    summary = (up_api.describe_changes(changes, planned=bool(update.spec and update.spec.type == up_api.PREVIEW))
               if changes is not None else None)
    if failed:
        # the summary before the (long, truncated at 1024 characters) error text, so it always shows
        head = f"Failed to update stack ({summary})" if summary else "Failed to update stack"
        return f"{head}: {status.message or ''}"
    return f"Successfully updated stack: {summary}" if summary else "Successfully updated stack"


def masked_outputs(data: Mapping[str, bytes], secret_keys: Sequence[str]) -> dict[str, Any]:
    """Stack `status.outputs` from the outputs Secret: JSON values, secret ones replaced by "[secret]"."""
    result: dict[str, Any] = {}
    for key in sorted(data):
        result[key] = SECRET_MASK if key in secret_keys else json.loads(data[key])
    return result


def requeue_after(stack: stack_api.Stack, now: datetime.datetime,
                  default_cap: float | None = None, *, defaults: RetryPolicy = DEFAULT_POLICY,
                  min_resync: float = MIN_RESYNC) -> float | None:
    """When to look again at a synced Stack: backoff retry (or stalled retry), resync, or branch polling (the
    smallest)."""
    spec = stack_api.spec_of(stack)
    last = (stack.status or stack_api.StackStatus()).last_update
    if last is None:
        return None
    since = (now - (conditions.parse_time(last.last_resync_time) or now)).total_seconds()
    policy = stack_policy(stack, default_cap, defaults=defaults)
    after: float | None = None
    if last.state == stack_api.STATE_FAILED and not stalled(last, policy):
        after = max(1.0, policy.backoff(last.failures or 0) - since)
    elif stalled(last, policy) and policy.stalled_retry_interval > 0:
        after = max(1.0, policy.stalled_retry_interval - since)
    if last.state == stack_api.STATE_SUCCEEDED and spec.continue_resync_on_commit_match:
        after = max(1.0, resync_frequency(spec, min_resync) - since)
    poll = branch_poll(spec, min_resync)
    if poll is not None:
        after = max(1.0, min(poll, after) if after else poll)
    return after


def branch_poll(spec: stack_api.StackSpec, min_resync: float = MIN_RESYNC) -> float | None:
    """How often a Stack that follows a git branch looks for a new commit (None: nothing to poll; Flux sources and
    Programs are watched). A Stack stalled for any reason keeps polling: the next commit may be the fix."""
    return resync_frequency(spec, min_resync) if spec.project_repo and spec.branch else None


def next_retry_at(stack: stack_api.Stack, default_cap: float | None = None, *,
                  defaults: RetryPolicy = DEFAULT_POLICY) -> datetime.datetime | None:
    """When the failure policy retries the Stack's failed update with no change of spec or source: its last
    failure plus the backoff (`is_synced` lets it through from then on), or plus the stalled retry interval; None
    when nothing failed, or when a Stalled Stack waits for a change. Suspension is not considered here."""
    last = (stack.status or stack_api.StackStatus()).last_update
    failed_at = conditions.parse_time(last.last_resync_time) if last is not None else None
    if last is None or last.state != stack_api.STATE_FAILED or failed_at is None:
        return None
    policy = stack_policy(stack, default_cap, defaults=defaults)
    if stalled(last, policy):
        if policy.stalled_retry_interval <= 0:
            return None
        return failed_at + datetime.timedelta(seconds=policy.stalled_retry_interval)
    return failed_at + datetime.timedelta(seconds=policy.backoff(last.failures or 0))


def is_suspended(stack: stack_api.Stack) -> bool:
    """`spec.suspend` holds: no new update starts. Deletion is not suspended (as in Flux): the finalizer still
    runs, with the destroy `destroyOnFinalize` promised."""
    return bool(stack_api.spec_of(stack).suspend) and stack.metadata.deletion_timestamp is None


def shows_suspended(found: Sequence[Condition] | None) -> bool:
    """The conditions already say suspended (so the transition's event is sent once)."""
    reconciling = conditions.find(found, conditions.RECONCILING)
    return (reconciling is not None and reconciling.status == "False"
            and reconciling.reason == conditions.RECONCILING_SUSPENDED)


def mark_suspended(found: Sequence[Condition] | None, last: stack_api.StackUpdateState | None, absorbed: bool,
                   now: datetime.datetime, *, policy: RetryPolicy = DEFAULT_POLICY) -> list[Condition]:
    """The conditions of a suspended Stack: `Reconciling=False/Suspended`; `Ready` (and `Stalled`) keep their
    value, except that an Update that finished in this pass (`absorbed`) still reports its outcome."""
    result = mark_result(found, last, now, policy=policy) if absorbed and last is not None else list(found or ())
    return conditions.set_condition(result, conditions.RECONCILING, "False", conditions.RECONCILING_SUSPENDED,
                                    conditions.MESSAGE_SUSPENDED, now=now)


def processing_message(stack: stack_api.Stack) -> str:
    """The Reconciling message while an Update runs; a suspended Stack adds that none follows it."""
    if is_suspended(stack):
        return f"{conditions.MESSAGE_STACK_PROCESSING}; {conditions.MESSAGE_SUSPENDED_AFTER}"
    return conditions.MESSAGE_STACK_PROCESSING


WORKSPACE_PROBLEM_REASON = "WaitingForReplicas"  # the Workspace Ready reason its runtimes report a stuck agent with
WORKSPACE_NOT_READY_EVENT = "WorkspaceNotReady"


def waiting_for_workspace_message(ready: Condition | None) -> str:
    """The Stack's Reconciling message while its Workspace is not ready: the Go operator's "waiting for workspace
    readiness", followed by what the Workspace says is stuck when it says so.

    Why: a refused source (an unsafe or tampered artifact, a failing fetch) or a pod that cannot start is reported
    on the Workspace only (``WaitingForReplicas`` with ``<what it waits for>: <problem>``); a user looking at the
    Stack would otherwise see nothing but "waiting". Plain waiting (no problem named) keeps the reference's text."""
    message = conditions.MESSAGE_WAITING_FOR_WORKSPACE
    if (ready is None or ready.status != "False" or ready.reason != WORKSPACE_PROBLEM_REASON
            or ": " not in (ready.message or "")):
        return message
    return f"{message}: {ready.message}"


@dataclass(frozen=True)
class Unsatisfied:
    message: str
    request_resync_of: str | None = None  # the prerequisite's lastUpdate name, when it is merely out of date


def prerequisite_problem(requirement: stack_api.RequirementSpec | None, other: stack_api.Stack,
                         now: datetime.datetime) -> Unsatisfied | None:
    """Why `other` does not satisfy `requirement` (None when it does)."""
    last = (other.status or stack_api.StackStatus()).last_update
    if (last is None or last.generation != other.metadata.generation
            or (last.reconcile_request or "") != reconcile_request(other)):
        return Unsatisfied("prerequisite has not run to completion")
    if last.state != stack_api.STATE_SUCCEEDED:
        return Unsatisfied("prerequisite failed")
    if requirement is not None and requirement.succeeded_within_duration:
        window = durations.parse(requirement.succeeded_within_duration)
        elapsed = (now - (conditions.parse_time(last.last_resync_time) or now)).total_seconds()
        if elapsed > window:
            return Unsatisfied("prerequisite is out of date", last.name)
    return None


def refresh_stuck_workspace(*, started: bool, stack_generation: int | None, update_generation: int | None,
                            deleting: bool, workspace_ready: bool) -> bool:
    """Whether to re-apply the Workspace of a current Update that is still waiting: only before the Update has
    started (never under a running operation), only while its Workspace is not ready (a Ready one needs
    nothing), only for the generation the Update was made for (so it runs the spec it was created for), and not
    while deleting (the destroy's Workspace is built from the recorded project, not the source)."""
    return (not started and not workspace_ready and not deleting and stack_generation is not None
            and stack_generation == update_generation)
