"""A Stack relabelled from one shard to another: when its new shard takes its Workspace and Updates — pure.

Why: the shard label selects what each operator watches, so relabelling a Stack moves the Stack at once, but not the
Workspace and Updates it created (they carry the label they were created with). The new shard takes them over
by relabelling them, and only when no Update of the Stack still runs in the shard it comes from: that operator
streams the operation and records its result, and taking its Workspace away in the middle would stop a local agent
or leave a result unrecorded. Until then the Stack waits, says so, and looks again every :data:`POLL` seconds (the
other shard's Updates are not in this shard's watches). So an operation is never run twice, nor cut short, by a
move.

Pure: the executor in the Stack reconciler reads the objects and writes the labels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pko.api import conditions, names
from pko.kube import objects
from pko.runtime import sharding

#: Seconds between two looks at an Update still running in the shard a Stack comes from.
POLL = 5.0


@dataclass(frozen=True)
class Move:
    """What the new shard does now: wait for `running` (Update names) to finish, else relabel `updates` and the
    Workspace (`workspace`) to `value` (None: remove the label, for the default shard)."""

    running: tuple[str, ...] = ()
    updates: tuple[str, ...] = ()
    workspace: bool = False
    value: str | None = None

    @property
    def waiting(self) -> bool:
        return bool(self.running)


def plan(shard: sharding.Shard, stack_labels: Mapping[str, str] | None, workspace: objects.Object | None,
         updates: Sequence[objects.Object]) -> Move:
    """The move of a Stack's `workspace` and `updates` (all of the Stack's, as the API server has them) into
    `shard`, which owns the Stack (whose labels are `stack_labels`)."""
    value = sharding.carried_labels(stack_labels).get(names.LABEL_SHARD_KEY)
    foreign = [u for u in updates if not shard.owns(u)]
    running = tuple(sorted(objects.name_of(u) for u in foreign if not objects.condition_true(u, conditions.COMPLETE)))
    if running:
        return Move(running=running, value=value)
    return Move(updates=tuple(sorted(objects.name_of(u) for u in foreign)),
                workspace=workspace is not None and not shard.owns(workspace), value=value)


def origin(workspace: objects.Object | None) -> str:
    """The shard a Workspace is in, for messages."""
    value = objects.labels_of(workspace or {}).get(names.LABEL_SHARD_KEY)
    return f"shard {value}" if value else "the default shard"


def waiting_message(move: Move, workspace: objects.Object | None) -> str:
    return (f"moving to this shard: waiting for Update {', '.join(move.running)} to finish in {origin(workspace)} "
            "before this shard takes over the Stack's workspace")


def moved_message(move: Move, workspace: objects.Object | None) -> str:
    target = f"shard {move.value}" if move.value else "the default shard"
    parts = (["the Workspace"] if move.workspace else []) + (
        [f"{len(move.updates)} Update{'s' if len(move.updates) != 1 else ''}"] if move.updates else [])
    return f"moved {' and '.join(parts)} from {origin(workspace)} to {target}"
