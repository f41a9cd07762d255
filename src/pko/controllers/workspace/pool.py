"""The bounded pool of active workspaces: at most N agents (pods, or local processes) run at once.

Why: the Go operator keeps one long-lived pod per Stack, so a fleet of hundreds of Stacks meets the node's pod cap
(kubelet's 110) and its requests long before the operator's own limits (PKO#1293, PKO#1294). With
``--max-active-workspaces N`` (docs/scale.md) a Workspace needs one of N slots to run its agent:

- a Workspace that needs to run while every slot is held *waits* in an ordered queue, and says so
  (``Ready=False/Queued`` with its position; its Stack shows ``Reconciling/Queued``);
- the queue's order is the lane first (:mod:`pko.api.lanes`: destroys, then changes, then retries, then resyncs),
  then round-robin between namespaces (the i-th waiter of every namespace before the (i+1)-th of any: one team's
  500 Stacks cannot starve another's 5), then arrival;
- a holder *yields* its slot by sleeping (scale to zero, docs/scale-to-zero.md) once it is idle and somebody waits
  for it, least recently used first; a busy one (an Update pending, a saved plan, an agent starting) never does.

The pool lives in the leader's memory. It is seeded from the Workspaces' statuses when the first one asks for a
slot, so an operator restarted under a running fleet counts the agents that already run; over-commitment (a pool
made smaller) drains as the extra holders go idle.

A waiter is told its place when it asks (`claim`); when the queue changes, the pool wakes the waiters whose place
moved enough to be worth showing (three quarters of it, or any move among the first ten), so a fleet's waiters follow
the queue without each looking at it on a timer: with 1,000 waiters, the looks were most of the operator's work.
The pool looks through its queue for them at most every :data:`SCAN_EVERY` seconds (once for the changes that come
meanwhile), and keeps the queue in order as waiters come and go (:mod:`.waitqueue`) rather than ordering it anew.
A waiter is woken to show its place at most every :data:`SHOW_EVERY` seconds (a move sooner is shown when that
time is up, with any that follow): each grant moves the first ten places by one, and showing each move at once was
ten Workspace status writes a grant. A slot is never delayed: the head of the queue is woken at once for it.

Single event loop, no locks: every method is synchronous and only *enqueues* reconciles (`wake`); the Workspace
reconciler decides and acts. Must never: take a slot from a busy holder, or let a waiter overtake the queue's
order for a slot.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from pko.api import lanes
from pko.api import stack as stack_api
from pko.api import workspace as ws_api
from pko.controllers.workspace.waitqueue import Waiter, WaitQueue, order
from pko.kube import objects

__all__ = ["GRANTED", "Pool", "Queued", "Waiter", "moved_enough", "order", "stack_tells", "worth_writing"]

Key = objects.ObjectKey


@dataclass(frozen=True)
class Queued:
    """A Workspace waits for a slot: `position` (1-based) among `waiting`, with all `size` slots held."""

    position: int
    waiting: int
    size: int
    lane: int

    def message(self) -> str:
        return lanes.queued_message(self.position, self.waiting, self.size, self.lane)


GRANTED = None  # what claim() returns when the Workspace holds a slot

#: Places up to this one are always shown exactly (the next few to start); further back, a place is written again
#: once it moved by :data:`MOVED_ENOUGH` of itself (:func:`worth_writing`).
EXACT_PLACES = 10
#: Three quarters: a waiter that enters 980 deep is written at about 245, 61 and 15 before the front ten (7 times
#: with a half, 17 with a quarter, 45 with a tenth). With a half, the places were still 3.1 of a Stack's Workspace
#: status writes in a 1,000-Stack fleet, each one a reconcile and a watch event too (docs/performance.md).
MOVED_ENOUGH = 0.75


#: How long a slot may drain (its pod terminating) before the waiters stop counting on it and idle holders are asked
#: to make room instead (seconds): an idle workspace's pod stops in seconds; one on a lost node never does.
STUCK_DRAINING = 120.0

#: The least time between two looks through the queue for waiters whose place moved enough to be shown (seconds),
#: when the pool can defer one (:meth:`Pool._changed`).
SCAN_EVERY = 2.0

#: The least time between two wakes of a waiter to show its place (seconds): as often as each waiter used to look
#: at the queue itself, so the pushed queue writes no more than those looks did (at 400 Stacks with 10 s it still
#: wrote half as much again: docs/performance.md).
SHOW_EVERY = 30.0


def moved_enough(shown: int, place: int) -> bool:
    """Whether a waiter shown at place `shown` is worth showing `place` now: near the front, every move; further
    back, a move by three quarters of its place."""
    return shown != place and (place <= EXACT_PLACES or abs(shown - place) >= MOVED_ENOUGH * shown)


def worth_writing(shown: str | None, queued: Queued) -> bool:
    """Whether a queued Workspace's status must be written again to show `queued`, when it shows `shown`: a new
    lane or pool size, a place near the front, or a place that moved by at least three quarters of itself. Each
    write is a request, and a watch event for every client of Workspaces; a deep queue moves by one place each time
    a slot frees, and "100 of 180" against "40 of 180" tells a person nothing the next write will not."""
    if shown is None or lanes.queued_summary(shown) != lanes.queued_summary(queued.message()):
        return True
    place = lanes.queued_place(shown)
    return place is None or queued.position <= EXACT_PLACES or moved_enough(place, queued.position)


def stack_tells(workspace: ws_api.Workspace) -> bool:
    """Whether a Stack controls `workspace`: its Stack then posts the queue's event (``StackQueued``, with the place
    it entered at) and the Workspace posts none; a Workspace made without a Stack says ``Queued`` itself. One event
    a queued Stack instead of two: in a pool that turns over, events are a fifth of the operator's requests."""
    return any(ref.controller and ref.kind == stack_api.KIND and ref.api_version == stack_api.API_VERSION
               for ref in workspace.metadata.owner_references or ())


class Pool:
    """The slots, their holders (with when each was last used, None while busy) and the waiters."""

    def __init__(self, size: int, wake: Callable[[Key], None],
                 seed: Callable[[], Iterable[Key]] = lambda: (),
                 wake_later: Callable[[Key, float], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 defer: Callable[[float, Callable[[], None]], object] | None = None) -> None:
        if size < 1:
            raise ValueError(f"a pool of active workspaces needs at least one slot, not {size}")
        self.size = size
        self.wake = wake  # enqueue a Workspace's reconcile
        self.wake_later = wake_later or (lambda key, delay: wake(key))  # ... after `delay` seconds
        self.clock = clock
        #: run a function after a delay (the event loop's call_later): the queue's look for waiters to wake is then
        #: made at most every :data:`SCAN_EVERY` seconds; None: at every change
        self.defer = defer
        self._seed_source = seed
        self._seed: Callable[[], Iterable[Key]] | None = seed
        self.holders: dict[Key, float | None] = {}  # key -> last used (epoch seconds) while idle, None while busy
        self.queue = WaitQueue()  # the waiters, in order
        #: slots given back whose agent is still stopping (a pod terminating is still on the node): taken until
        #: released again with `draining` False; with when each began to drain
        self.draining: dict[Key, float] = {}
        self._arrivals = itertools.count()
        self.yielded = 0  # slots given back because somebody waited (pko_workspace_pool_yields_total)
        #: the place each waiter was last given, and when; when the queue moves, those whose place moved enough
        #: are woken to show it (:meth:`_changed`), so a waiter needs no timer to follow the queue
        self._told: dict[Key, tuple[int, float]] = {}
        self._woken: set[Key] = set()  # waiters woken (now or later) to show their place, until they ask
        self._scanned = float("-inf")  # when the queue was last looked through for waiters to wake
        self._scan_owed = False  # a look is deferred (:meth:`_changed`)

    @property
    def waiters(self) -> Mapping[Key, Waiter]:
        return self.queue.waiters

    def reset(self) -> None:
        """Forget every holder and waiter, to be seeded again from the Workspaces' statuses at the next ask: a
        term of leadership starts (another replica led in between, starting and stopping agents this one never
        saw; what it kept would leak slots or overcommit). Waiters ask again as every Workspace is looked at."""
        self._seed = self._seed_source
        self.holders.clear()
        self.queue = WaitQueue()
        self.draining.clear()
        self._told.clear()
        self._woken.clear()
        self._scanned = float("-inf")

    def _seeded(self) -> None:
        if self._seed is not None:
            seed, self._seed = self._seed, None
            self.holders.update((key, None) for key in seed())

    def holds(self, key: Key) -> bool:
        self._seeded()
        return key in self.holders

    def claim(self, key: Key, lane: int) -> Queued | None:
        """A slot for `key` (:data:`GRANTED`), or its place in the queue; a waiter asks the least recently used
        idle holders to give theirs back."""
        self._seeded()
        if key in self.holders:
            return GRANTED
        found = self.queue.get(key)
        if found is None or found.lane != lane:
            self.queue.put(key, Waiter(lane, found.arrival if found is not None else next(self._arrivals)))
            self._changed(but=key)
        position = self.queue.place(key)
        self._woken.discard(key)
        if position < self._free():
            self.queue.remove(key)
            self._told.pop(key, None)
            self.holders[key] = None
            self._changed()
            return GRANTED
        for holder in self._to_yield():
            self.wake(holder)
        self._told[key] = (position + 1, self.clock())
        return Queued(position + 1, len(self.queue), self.size, lane)

    def _changed(self, but: Key | None = None) -> None:
        """The queue changed: look for the waiters whose place moved enough to be shown (:meth:`_scan`) — now, or,
        with :attr:`defer`, once :data:`SCAN_EVERY` has passed since the last look (one look for the changes that
        come meanwhile: a look goes through the whole queue, and a 1,000-Stack fleet's queue changes some two
        thousand times). The head of the queue is woken for a free slot apart from this, at once (:meth:`release`)."""
        if self.defer is None:
            self._scan(but)
            return
        if self._scan_owed:
            return
        wait = self._scanned + SCAN_EVERY - self.clock()
        if wait <= 0:
            self._scan(but)
            return
        self.defer(wait, self._owed_scan)
        self._scan_owed = True  # once the look is sure to come (a defer that fails leaves the next change to look)

    def _owed_scan(self) -> None:
        self._scan_owed = False
        self._scan()

    def _scan(self, but: Key | None = None) -> None:
        """Wake the waiters (but `but`, which is asking and is told its place) whose place moved enough to be
        shown — at once, or once :data:`SHOW_EVERY` has passed since they were last told."""
        now = self._scanned = self.clock()
        for place, key in enumerate(self.queue.order(), 1):
            told = self._told.get(key)
            if key == but or told is None or key in self._woken or not moved_enough(told[0], place):
                continue
            self._woken.add(key)
            wait = told[1] + SHOW_EVERY - now
            if wait > 0:
                self.wake_later(key, wait)
            else:
                self.wake(key)

    def used(self, key: Key, last_used: float | None) -> None:
        """A holder says whether it is idle (`last_used`: when it last worked) or busy (None). One that was idle
        and is busy now (an Update came: a holder is not reconciled for a new one, see
        ``setup.not_for_holders``) may have been asked to yield: the next least recently used idle holders are
        asked in its place, or the waiters would wait for the next change of the queue."""
        if key not in self.holders:
            return
        was = self.holders[key]
        self.holders[key] = last_used
        if was is not None and last_used is None and self.queue:
            for holder in self._to_yield():
                self.wake(holder)

    def must_yield(self, key: Key) -> bool:
        """`key` is idle and among the least recently used holders that waiters (or a pool made smaller) need."""
        return key in self._to_yield()

    def _to_yield(self) -> list[Key]:
        # a slot draining for long is taken for good as far as the waiters know: a pod stuck terminating (a lost
        # node) must not leave them behind an idle holder that could give its own. One that drains as it should
        # (seconds) is the waiter's already: counting it would ask every idle holder at once for one waiter.
        now = self.clock()
        stuck = sum(1 for since in self.draining.values() if now - since > STUCK_DRAINING)
        excess = len(self.holders) + stuck + len(self.queue) - self.size
        if excess <= 0:
            return []
        idle = sorted((since, key) for key, since in self.holders.items() if since is not None)
        return [key for _, key in idle[:excess]]

    def release(self, key: Key, *, yielded: bool = False, draining: bool = False) -> None:
        """`key` runs no agent any more (asleep, deleted) or no longer waits: its slot goes to the head of the
        queue (woken to claim it). With `draining`, its agent is still stopping: the slot stays taken (nobody is
        woken for it) until a release without."""
        self._seeded()
        held = self.holders.pop(key, False) is not False
        self._told.pop(key, None)
        self._woken.discard(key)
        if self.queue.remove(key) is not None:
            self._changed()
        if held and yielded:
            self.yielded += 1
        if draining and (held or key in self.draining):
            self.draining.setdefault(key, self.clock())
        else:
            self.draining.pop(key, None)
        for waiter in self.queue.order()[:max(self._free(), 0)]:
            self.wake(waiter)

    def stopping(self, key: Key) -> bool:
        """Whether `key` gave its slot back and its agent is still stopping."""
        return key in self.draining

    def _free(self) -> int:
        return self.size - len(self.holders) - len(self.draining)

    def active(self) -> int:
        """Slots taken: holders, and agents still stopping."""
        return len(self.holders) + len(self.draining)

    def waiting(self) -> int:
        return len(self.queue)
