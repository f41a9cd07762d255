"""A small cache whose entries each carry their own expiry, the oldest going first when it is full.

Why a module of its own, below every layer: the agent's authorisation caches its token and access reviews with it
(:mod:`pko.agent.auth`), and the operator's dependency cache its refusals of npm trees too big to keep
(:mod:`pko.depcache.server`). Pure: the clock is passed in; no other pko import.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

#: Entries kept by default.
CACHE_SIZE = 1024

Value = TypeVar("Value")


@dataclass
class TTLCache(Generic[Value]):
    """Values by key until their expiry; putting a key again renews it and makes it the newest."""

    size: int = CACHE_SIZE
    clock: Callable[[], float] = time.monotonic
    _entries: dict[Hashable, tuple[float, Value]] = field(default_factory=dict)

    def get(self, key: Hashable) -> Value | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, value = entry
        if self.clock() >= expires:
            del self._entries[key]
            return None
        return value

    def put(self, key: Hashable, value: Value, ttl: float) -> None:
        self._entries.pop(key, None)
        while len(self._entries) >= self.size:
            del self._entries[next(iter(self._entries))]
        self._entries[key] = (self.clock() + ttl, value)
