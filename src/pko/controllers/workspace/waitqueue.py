"""The pool's queue of waiting Workspaces, kept in order as waiters come and go.

Why: the pool ordered every waiter anew (two sorts and a pass in Python) each time one came or went; with 1,000
Stacks in a pool of 20 that is a thousand arrivals and a thousand grants against a queue hundreds deep, about a
second of the operator's CPU for the order alone. Most changes need far less: the queue is its lanes one after the
other (:mod:`pko.api.lanes`), and a lane whose waiters are all of one namespace is in order of arrival, the
round-robin between namespaces having nothing to interleave. A change there puts one waiter in its place by
arrival, or takes it out; only a lane that holds several namespaces is ordered again, and only that lane. Taking a
waiter out of a lane that keeps a single namespace keeps the rest in order too: the round-robin never reorders a
namespace's own waiters.

:func:`order` is the definition; :class:`WaitQueue` must always agree with it (a property test holds it to that).
"""

from __future__ import annotations

import bisect
import collections
from collections.abc import Mapping
from dataclasses import dataclass

from pko.kube import objects

Key = objects.ObjectKey


@dataclass(frozen=True)
class Waiter:
    lane: int
    arrival: int  # its place in the order of arrival (kept when its lane changes)


def order(waiters: Mapping[Key, Waiter]) -> list[Key]:
    """The queue: by lane; within a lane, round-robin between namespaces (a waiter's rank among its namespace's
    waiters of that lane comes first); then by arrival."""
    rank: collections.Counter[tuple[int, str]] = collections.Counter()
    keyed: list[tuple[tuple[int, int, int], Key]] = []
    for key, waiter in sorted(waiters.items(), key=lambda item: (item[1].lane, item[1].arrival)):
        group = (waiter.lane, key.namespace)
        keyed.append(((waiter.lane, rank[group], waiter.arrival), key))
        rank[group] += 1
    return [key for _, key in sorted(keyed)]


class WaitQueue:
    """The waiters (:attr:`waiters`, read-only outside) and their order, lane by lane."""

    def __init__(self) -> None:
        self.waiters: dict[Key, Waiter] = {}
        self._lanes: dict[int, list[Key]] = {}
        self._namespaces: dict[int, collections.Counter[str]] = {}
        self._flat: list[Key] | None = None

    def __len__(self) -> int:
        return len(self.waiters)

    def __contains__(self, key: object) -> bool:
        return key in self.waiters

    def get(self, key: Key) -> Waiter | None:
        return self.waiters.get(key)

    def put(self, key: Key, waiter: Waiter) -> None:
        """`key` waits as `waiter` (a new waiter, or one whose lane changed)."""
        if key in self.waiters:
            self.remove(key)
        self.waiters[key] = waiter
        lane = self._lanes.setdefault(waiter.lane, [])
        namespaces = self._namespaces.setdefault(waiter.lane, collections.Counter())
        namespaces[key.namespace] += 1
        if len(namespaces) == 1:
            lane.insert(bisect.bisect(lane, waiter.arrival, key=lambda k: self.waiters[k].arrival), key)
        else:
            lane.append(key)
            self._reorder(waiter.lane)
        self._flat = None

    def remove(self, key: Key) -> Waiter | None:
        """`key` no longer waits; what it waited as (None: it did not)."""
        waiter = self.waiters.pop(key, None)
        if waiter is None:
            return None
        lane = self._lanes[waiter.lane]
        lane.remove(key)
        namespaces = self._namespaces[waiter.lane]
        namespaces[key.namespace] -= 1
        if not namespaces[key.namespace]:
            del namespaces[key.namespace]
        if not lane:
            del self._lanes[waiter.lane], self._namespaces[waiter.lane]
        elif len(namespaces) > 1:
            self._reorder(waiter.lane)
        self._flat = None
        return waiter

    def order(self) -> list[Key]:
        """The queue, first first (do not change it)."""
        if self._flat is None:
            self._flat = [key for lane in sorted(self._lanes) for key in self._lanes[lane]]
        return self._flat

    def place(self, key: Key) -> int:
        """`key`'s index in :meth:`order` (it must be waiting)."""
        lane = self.waiters[key].lane
        ahead = sum(len(keys) for other, keys in self._lanes.items() if other < lane)
        return ahead + self._lanes[lane].index(key)

    def _reorder(self, lane: int) -> None:
        self._lanes[lane] = order({key: self.waiters[key] for key in self._lanes[lane]})
