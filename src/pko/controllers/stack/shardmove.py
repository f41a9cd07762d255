"""A Stack relabelled from one shard to another: when its new shard takes its Workspace and Updates — pure.

Why: the shard label selects what each operator watches, so relabelling a Stack moves the Stack at once, but not the
Workspace and Updates it created (they carry the label they were created with). The new shard takes them over
by relabelling them, and only when no Update of the Stack still runs in the shard it comes from: that operator
streams the operation and records its result, and taking its Workspace away in the middle would stop a local agent
or leave a result unrecorded. Until then the Stack waits, says so, and looks again every :data:`POLL` seconds (the
other shard's Updates are not in this shard's watches). So an operation is never run twice, nor cut short, by a
move.

Unless the shard it comes from is gone: a shard taken out of the chart, or an operator that died mid-Update, leaves
its running Update Progressing for ever, and the Stack would wait for ever. With leader election on, each shard's
leader holds its own Lease (:func:`pko.runtime.sharding.lease_name`), which the Workspaces it makes name (a custom
selector's Lease cannot be told from their labels); a Lease with no holder (its operator stopped and released it) or
left unrenewed for twice its duration (the holder died; twice, so that a slow leader or clocks that differ between
nodes are not taken for a dead one) says nobody runs that Update any more. The new shard then
takes the running Update over too, as an operation its operator's end interrupted: its own Update controller
resumes or aborts it as after a restart, and the Stack runs again if it was aborted. Without leader election there is
no Lease to tell, and the Stack keeps waiting, as it says.

Pure: the executor in the Stack reconciler reads the objects and writes the labels.
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pko.api import conditions, names
from pko.kube import objects
from pko.runtime import leaderelection, sharding

#: Seconds between two looks at an Update still running in the shard a Stack comes from.
POLL = 5.0
#: How many lease durations a shard's Lease goes unrenewed before its operator is taken for gone.
LEASE_GRACE = 2.0


@dataclass(frozen=True)
class Move:
    """What the new shard does now: wait for `running` (Update names) to finish, else relabel `updates` and the
    Workspace (`workspace`) with `labels`, a merge patch of the labels the shard carries (the shard label, and what a
    custom selector looks at; a None value removes a label)."""

    running: tuple[str, ...] = ()
    updates: tuple[str, ...] = ()
    workspace: bool = False
    labels: Mapping[str, str | None] = field(default_factory=dict)
    #: Updates that were running in a shard whose operator is gone (`gone` says how that is known): taken over
    #: with the rest, as interrupted operations.
    interrupted: tuple[str, ...] = ()
    gone: str | None = None
    target: str = "the default shard"  # the shard that takes them, for messages

    @property
    def waiting(self) -> bool:
        return bool(self.running)


def plan(shard: sharding.Shard, stack_labels: Mapping[str, str] | None, workspace: objects.Object | None,
         updates: Sequence[objects.Object], gone: str | None = None, templated: Collection[str] = ()) -> Move:
    """The move of a Stack's `workspace` and `updates` (all of the Stack's, as the API server has them) into
    `shard`, which owns the Stack (whose labels are `stack_labels`); `gone`: why the operator of the shard they
    are in is known to be gone (:func:`origin_gone`), so that its running Updates are taken over too; `templated`:
    the label keys the Stack's workspace and update templates set (:func:`templated_keys`), which stay."""
    foreign = [u for u in updates if not shard.owns(u)]
    workspace_moves = workspace is not None and not shard.owns(workspace)
    moved = foreign + ([workspace] if workspace is not None and workspace_moves else [])
    labels = shard.carried_patch(stack_labels) | _left_behind(set(stack_labels or {}) | set(templated), moved)
    running = tuple(sorted(objects.name_of(u) for u in foreign if not objects.condition_true(u, conditions.COMPLETE)))
    target = _describe(shard)
    if running and gone is None:
        return Move(running=running, labels=labels, target=target)
    return Move(updates=tuple(sorted(objects.name_of(u) for u in foreign)),
                workspace=workspace_moves, labels=labels,
                interrupted=running, gone=gone if running else None, target=target)


def _describe(shard: sharding.Shard) -> str:
    if shard.name is not None:
        return f"shard {shard.name}"
    if own_lease(shard) in (None, leaderelection.DEFAULT_LEASE_NAME):
        return "the default shard"
    return f"the operator watching {shard.selector.text}"


def _left_behind(kept: set[str], moved: Sequence[objects.Object]) -> dict[str, None]:
    """Labels the moved objects carried for the shard they come from and the Stack no longer has (a move between
    selectors on different keys, `team=a` to `region=eu`): removed, or the operator they come from would still
    select them. The objects carry pko's own labels (in a pulumi.com domain: the Stack's name, a drift check's
    mark), the Stack's and its templates' (`kept`); any other key was left behind."""
    return {key: None for obj in moved for key in objects.labels_of(obj) if key not in kept and not _own(key)}


def _own(key: str) -> bool:
    domain = key.partition("/")[0] if "/" in key else ""
    return domain == "pulumi.com" or domain.endswith(".pulumi.com")


def templated_keys(workspace_template: Mapping[str, Any] | None, update_template: Mapping[str, Any] | None) -> set[str]:
    """The label keys a Stack's `workspaceTemplate` and `updateTemplate` give its Workspace and Updates."""
    return {key for template in (workspace_template, update_template)
            for key in ((template or {}).get("metadata") or {}).get("labels") or {}}


def origin_value(workspace: objects.Object | None) -> str | None:
    """The shard label of the shard a Workspace is in (None: the default shard)."""
    return objects.labels_of(workspace or {}).get(names.LABEL_SHARD_KEY)


def own_lease(shard: sharding.Shard) -> str | None:
    """The Lease the leader of `shard` holds, which the Workspaces it makes name (:data:`names.ANNOTATION_SHARD_LEASE`);
    None for an operator that watches everything (nothing moves)."""
    return None if shard.everything else shard.lease_name(leaderelection.DEFAULT_LEASE_NAME)


def origin_lease(workspace: objects.Object | None) -> str:
    """The name of the Lease the leader of the shard a Workspace is in holds: the one the Workspace names, else the
    one of its shard label's shard (a Workspace of an older pko). Only a Lease of pko's leader election is taken from
    the annotation, so an edited annotation cannot send the check to an unrelated Lease."""
    default = leaderelection.DEFAULT_LEASE_NAME
    named = objects.annotations_of(workspace or {}).get(names.ANNOTATION_SHARD_LEASE, "")
    if named == default or named.startswith(f"{default}-"):
        return named
    return sharding.lease_name(default, origin_value(workspace))


def origin_gone(lease: Mapping[str, object] | None, now: datetime.datetime) -> str | None:
    """Why the operator of a shard is known to be gone, from its leader-election `lease`; None while it may run (the
    Lease is held and renewed, or there is no Lease to tell)."""
    if lease is None:
        return None
    record = leaderelection.record_of(dict(lease))
    name = objects.name_of(dict(lease))
    if not record.holder:
        return f"its Lease {name} has no holder: its operator stopped"
    if record.renew_time is None:
        return None
    silent = (now - record.renew_time).total_seconds()
    if silent > LEASE_GRACE * max(record.lease_duration, 1.0):
        return (f"its Lease {name}, held by {record.holder}, was last renewed {silent:.0f}s ago (its duration is "
                f"{record.lease_duration:.0f}s): its operator is gone")
    return None


def origin(workspace: objects.Object | None) -> str:
    """The shard a Workspace is in, for messages."""
    value = origin_value(workspace)
    if value:
        return f"shard {value}"
    lease = origin_lease(workspace)
    return "the default shard" if lease == leaderelection.DEFAULT_LEASE_NAME else f"the operator of Lease {lease}"


def waiting_message(move: Move, workspace: objects.Object | None) -> str:
    return (f"moving to this shard: waiting for Update {', '.join(move.running)} to finish in {origin(workspace)} "
            "before this shard takes over the Stack's workspace")


def moved_message(move: Move, workspace: objects.Object | None) -> str:
    target = move.target
    parts = (["the Workspace"] if move.workspace else []) + (
        [f"{len(move.updates)} Update{'s' if len(move.updates) != 1 else ''}"] if move.updates else [])
    moved = f"moved {' and '.join(parts)} from {origin(workspace)} to {target}"
    if not move.interrupted:
        return moved
    return (f"{moved}; {origin(workspace)} is gone ({move.gone}), so Update {', '.join(move.interrupted)}, which ran "
            "there, is taken over as an operation its operator's end interrupted")
