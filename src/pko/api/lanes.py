"""Which lane a workspace's work goes in when the pool of active workspaces is full — pure.

Why: with ``--max-active-workspaces`` (docs/scale.md) workspaces wait for a slot, and not all waiting is equal: a
deletion holds a Stack's finalizer (and often a namespace's deletion) until its destroy runs; a spec change or a
new commit is what a person is waiting for; a retry of a failure can wait behind them; a resync or drift check,
whose result is usually "nothing changed", goes last. The lane is read from the Update the workspace is woken for:
its type, pko's drift-check label, and the reason the Stack controller wrote into ``spec.message`` (the Go
operator's texts, which are part of the contract — the Stack controller builds them from the prefixes here).

The queued message is here too: the Workspace controller writes it with the place in the queue, and the Stack
controller shows it without the place (:func:`queued_summary`), so a queue that moves does not rewrite every
waiting Stack's status.

Must never: do I/O, or read anything but the Updates (or the message) it is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from pko.api import update as up_api

DESTROY: Final = 0  # deletions and destroys
CHANGE: Final = 1  # a new Stack, a spec change, a new commit, a sync request
RETRY: Final = 2  # a retry after a failure (backoff or the stalled retry interval elapsed)
RESYNC: Final = 3  # a periodic resync, a drift check
NAMES: Final = ("destroy", "change", "retry", "resync")

# The Stack controller's `spec.message` prefixes (pko-v2 §3.1) that say why an Update was made.
RESYNC_ELAPSED: Final = "Resync time elapsed"
BACKOFF_ELAPSED: Final = "Backoff time elapsed"
STALLED_RETRY_ELAPSED: Final = "Stalled retry interval elapsed"


def of_update(update: up_api.Update) -> int:
    spec = update.spec or up_api.UpdateSpec()
    if spec.type == up_api.DESTROY:
        return DESTROY
    if (update.metadata.labels or {}).get(up_api.LABEL_DRIFT_CHECK) == "true":
        return RESYNC
    message = spec.message or ""
    if message.startswith(RESYNC_ELAPSED):
        return RESYNC
    if message.startswith((BACKOFF_ELAPSED, STALLED_RETRY_ELAPSED)):
        return RETRY
    return CHANGE


def of_updates(updates: Iterable[up_api.Update]) -> int:
    """The most urgent lane among `updates` (the pending ones, as the caller picks them); none: a change (a new
    workspace, or one whose Stack waits for it before it makes its Update)."""
    return min((of_update(u) for u in updates), default=CHANGE)


#: Between what a queued Workspace waits for and its place in the queue, in its Ready condition's message.
PLACE_SEPARATOR: Final = "; place in the queue: "


def queued_message(position: int, waiting: int, size: int, lane: int) -> str:
    """A queued Workspace's Ready message: the lane, the pool's size, then its (1-based) place in the queue."""
    return (f"waiting for a workspace slot ({NAMES[lane]} lane): all {size} slots of --max-active-workspaces are "
            f"busy{PLACE_SEPARATOR}{position} of {waiting}")


def queued_place(message: str) -> int | None:
    """The place a queued Workspace's message shows (None: it shows none)."""
    _, found, place = message.partition(PLACE_SEPARATOR)
    head = place.split(" of ", 1)[0]
    return int(head) if found and head.isdigit() else None


def queued_summary(message: str) -> str:
    """What a queued Workspace's Stack shows: its message without the place, which changes every time the queue
    moves (the Workspace's own status has it)."""
    head, found, _ = message.partition(PLACE_SEPARATOR)
    return f"{head}; its Workspace shows its place in the queue" if found else message
