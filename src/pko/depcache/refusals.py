"""The npm trees the dependency cache found too big to keep, remembered for a while.

Why: a tree's size is known only once it is built, or once its packages' tarballs are fetched and weighed. Without
a memory, every workspace pod of a Stack whose tree outgrows the cache's share asked again, and the cache fetched,
verified and wrote up to a quarter of its budget each time before refusing: seconds of CPU and hundreds of MB of
disk at every wake from scale-to-zero, for the same answer. A remembered refusal is answered at once (422, the
reason, and that it is remembered); the pod installs with npm as it would after the long way. It is forgotten
after :data:`REMEMBER_FOR` (a cache given more room is a restart of the operator, which forgets everything) and
the oldest go first past :data:`KEPT`. Pure: the clock is passed in.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

#: Seconds a refusal is remembered.
REMEMBER_FOR = 3600.0

#: The most refusals kept (one lockfile each).
KEPT = 1024


class Refusals:
    """Refused tree keys with why and until when."""

    def __init__(self, clock: Callable[[], float], *, remember_for: float = REMEMBER_FOR, kept: int = KEPT) -> None:
        self._clock = clock
        self._for = remember_for
        self._kept = kept
        self._found: collections.OrderedDict[str, tuple[float, str]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._found)

    def remember(self, key: str, reason: str) -> None:
        self._found.pop(key, None)
        self._found[key] = (self._clock() + self._for, reason)
        while len(self._found) > self._kept:
            self._found.popitem(last=False)

    def reason(self, key: str) -> str | None:
        """Why the tree `key` was refused, while that is remembered (None: not refused, or forgotten)."""
        found = self._found.get(key)
        if found is None:
            return None
        until, why = found
        if self._clock() >= until:
            del self._found[key]
            return None
        return why
