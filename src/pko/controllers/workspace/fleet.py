"""pko's rules for a fleet of workspaces: new config values without a new pod, and sleeping when idle — pure.

Why: the Go operator rolls the workspace pod on every Workspace generation (PKO#965), so a one-line config change
re-clones the source and re-runs `pulumi install`; and every Stack keeps a pod running between updates, holding
its requests (PKO#1318, PKO#694). Here:

- *config without a new pod* (docs/config-without-restart.md): the pod's revision hash follows the generation at
  which something other than `stacks[].config` values last changed (:func:`pod_revision`, recorded in
  ``status.applied``); the running agent gets the new values by the protocol's own SelectStack + SetAllConfig
  (RPCs the Go agent has too), and ``status.applied.configGeneration`` says which generation's values it has;
- *scale to zero* (docs/scale-to-zero.md): with an idle timeout (the Workspace's ``spec.idleTimeout``, else the
  operator's ``--workspace-idle-timeout``; off by default) a Workspace with no Update pending for that long
  sleeps: no pod (or agent process), ``Ready=True`` with reason ``Sleeping`` so its Stack stays Ready and starts
  the next Update as usual; that Update wakes it (``Ready=False/Waking``, then the usual start). A workspace whose
  latest Update is a preview that saved an update plan for an approval (docs/approvals.md) stays awake: the plan
  lives in the pod, and the approved `up` applies it there.

Must never: read the clock (callers pass ``now``), or do I/O.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pko.api import conditions, durations, names
from pko.api import update as up_api
from pko.api import workspace as ws_api
from pko.api.meta import Condition
from pko.controllers.workspace.runtime import REFUSED

# Workspace Ready reasons pko adds.
SLEEPING = "Sleeping"  # Ready=True: no agent runs; the next Update wakes it
WAKING = "Waking"  # Ready=False: an Update is pending and the agent is starting again


@dataclass(frozen=True)
class PodRevision:
    """What the pod is for: `generation` goes into the revision hash, `digest` is :func:`manifests.pod_digest`."""

    generation: int
    digest: str


def pod_revision(workspace: ws_api.Workspace, digest: str, in_place: bool = True) -> PodRevision:
    """The generation the pod keeps: the recorded one while the digest of everything but config values is the one
    recorded with it (a config-only change), else the Workspace's own generation (as the Go operator: a new pod).
    Without a record (a Workspace the operator has not placed yet, or placed before this rule), the generation —
    so a pod the previous version started is not rolled by the upgrade. Not `in_place`
    (``--workspace-config-in-place=false``): always the generation, every change a new pod."""
    generation = workspace.metadata.generation or 0
    applied = workspace.status.applied if workspace.status else None
    if (in_place and applied is not None and applied.pod_digest == digest and applied.pod_generation is not None
            and applied.pod_generation <= generation):
        return PodRevision(applied.pod_generation, digest)
    return PodRevision(generation, digest)


def config_due(applied: ws_api.AppliedState | None, generation: int) -> bool:
    """The initialised agent does not have the config values of `generation` yet."""
    return applied is None or applied.config_generation != generation


# --- scale to zero --------------------------------------------------------------------------------------------

def idle_timeout(workspace: ws_api.Workspace, default: float) -> float:
    """Seconds without an Update before the workspace sleeps; 0 never. The API server has checked the format
    (:data:`pko.api.workspace.DURATION_RULE`); a value it let through that does not parse counts as unset."""
    text = workspace.spec.idle_timeout if workspace.spec else None
    if text is None:
        return max(default, 0.0)
    try:
        return max(durations.parse(text), 0.0)
    except ValueError:
        return max(default, 0.0)


def sleeping(items: Sequence[Condition] | None) -> bool:
    ready = conditions.find(items, conditions.READY)
    return ready is not None and ready.status == "True" and ready.reason == SLEEPING


def pending(updates: Iterable[up_api.Update]) -> bool:
    """An Update of this workspace has not completed: it needs the agent."""
    return any(not conditions.is_true(u.status.conditions if u.status else None, conditions.COMPLETE)
               for u in updates)


def holds_plan(updates: Iterable[up_api.Update]) -> bool:
    """The workspace's latest Update is a preview that saved an update plan (awaiting its approval) and succeeded:
    the plan lives in the agent's workspace, so sleeping would lose it."""
    latest = max(updates, key=lambda u: (u.metadata.creation_timestamp or "", u.metadata.name or ""), default=None)
    if latest is None or latest.spec is None or latest.spec.type != up_api.PREVIEW:
        return False
    if (latest.metadata.annotations or {}).get(names.ANNOTATION_SAVE_PLAN) != "true":
        return False
    found = latest.status.conditions if latest.status else None
    return conditions.is_true(found, conditions.COMPLETE) and not conditions.is_true(found, conditions.FAILED)


@dataclass(frozen=True)
class Idle:
    """The decision: `sleep` now, or stay awake and look again after `requeue_after` seconds (None: an event
    brings the Workspace back — an Update's completion, a change)."""

    sleep: bool
    requeue_after: float | None = None


AWAKE = Idle(False)


def _completed_at(update: up_api.Update) -> datetime.datetime | None:
    complete = conditions.find(update.status.conditions if update.status else None, conditions.COMPLETE)
    if complete is None or complete.status != "True":
        return None
    return conditions.parse_time(complete.last_transition_time)


def decide(timeout: float, now: datetime.datetime, ready: Condition | None,
           updates: Sequence[up_api.Update]) -> Idle:
    """Whether the workspace sleeps. Awake while an Update is pending or a saved plan awaits its approval
    (:func:`holds_plan`), and while it is not ready for a reason of
    its own (starting, failing: the kubelet or the user has something to say); a healthy agent sleeps once
    `timeout` has passed since the later of becoming ready and its last Update completing; a sleeping one keeps
    sleeping until an Update is pending (a spec change alone does not wake it)."""
    if timeout <= 0 or pending(updates) or holds_plan(updates):
        return AWAKE
    if ready is not None and ready.status == "True" and ready.reason == SLEEPING:
        return Idle(True)
    if ready is None or ready.status != "True":
        return AWAKE
    moments = [m for m in (_completed_at(u) for u in updates) if m is not None]
    became_ready = conditions.parse_time(ready.last_transition_time)
    if became_ready is not None:
        moments.append(became_ready)
    if not moments:
        return Idle(False, timeout)
    idle_for = (now - max(moments)).total_seconds()
    if idle_for >= timeout:
        return Idle(True)
    return Idle(False, timeout - idle_for)


def sleeping_message(timeout: float) -> str:
    return (f"Scaled to zero after {durations.format_seconds(timeout)} without an update; the next update wakes "
            "the workspace")


WAKING_MESSAGE = "Waking the workspace for a pending update"


# --- the pool of active workspaces (pool.py) ------------------------------------------------------------------

#: How long a workspace that became ready keeps its slot before its first Update: its Stack makes that Update
#: right after, and taking the slot back in between would start the queue over for it.
FIRST_UPDATE_GRACE = 30.0


def last_used(now: datetime.datetime, ready: Condition | None, stalled: Condition | None,
              updates: Sequence[up_api.Update]) -> datetime.datetime | None:
    """When an idle workspace last worked (None: it is busy and keeps its slot). Busy: an Update pending, a saved
    plan awaiting its approval, an agent starting or failing for a reason that may pass. Idle: a ready agent that
    ran an Update since it became ready (or has waited :data:`FIRST_UPDATE_GRACE` for one), or a Stalled one (the
    caller passes only a stall of the current generation): it cannot work until its spec changes, whatever waits
    for it — an Update pending on it would hold the slot for ever."""
    if stalled is not None and stalled.status == "True":
        return conditions.parse_time(stalled.last_transition_time) or now
    if pending(updates) or holds_plan(updates):
        return None
    if ready is None or ready.status != "True" or ready.reason == SLEEPING:
        return None
    became_ready = conditions.parse_time(ready.last_transition_time) or now
    completed = [m for m in (_completed_at(u) for u in updates) if m is not None and m >= became_ready]
    if completed:
        return max(completed)
    if (now - became_ready).total_seconds() >= FIRST_UPDATE_GRACE:
        return became_ready
    return None


def refusal_retry_in(reason: str, tried: datetime.datetime | None, now: datetime.datetime,
                     every: float) -> float | None:
    """Seconds until a Workspace Stalled for `reason` tries its StatefulSet and Service again (0: now), or None
    when `reason` is no refusal of the API server's (only a new spec helps). Refusals are tried `every` seconds
    since the last try (`tried`; None: none since this process started, so now): an admission policy may be what
    changes, with the Workspace's spec as it was."""
    if reason not in REFUSED:
        return None
    if tried is None:
        return 0.0
    return max(0.0, every - (now - tried).total_seconds())


def yielded_message(size: int) -> str:
    return (f"Scaled to zero to give its slot to a waiting workspace (all {size} slots of --max-active-workspaces "
            "were busy); the next update wakes the workspace")
