"""How long a failed key waits before its next try: controller-runtime's default rate limiter, as pure math.

controller-runtime retries a failing reconcile after ``max(per-key exponential backoff, overall token bucket)``:
5 ms doubling per consecutive failure of that key up to 1000 s, and 10 retries/s with a burst of 100 across the
controller. Users tune their expectations (and the Stack's own cooldowns) against these numbers, so we keep them.

The functions here compute delays from explicit state and an explicit ``now``; they never read a clock, sleep
or do I/O. :class:`RateLimiter` only keeps that state per key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable


@dataclasses.dataclass(frozen=True)
class Backoff:
    """Per-key exponential backoff: ``base · 2^failures``, capped."""

    base: float = 0.005
    cap: float = 1000.0

    def delay(self, failures: int) -> float:
        """The wait before the next try of a key that failed ``failures`` times before this failure."""
        if failures >= 64:  # 2**64 · base overflows any sensible cap; avoid float overflow entirely
            return self.cap
        return float(min(self.base * (2**failures), self.cap))


@dataclasses.dataclass(frozen=True)
class Bucket:
    """A token bucket's state: tokens left (negative = reserved ahead) as of ``at``."""

    tokens: float
    at: float


@dataclasses.dataclass(frozen=True)
class BucketLimit:
    """Overall retry rate: ``rate`` tokens per second, at most ``burst`` saved up."""

    rate: float = 10.0
    burst: int = 100

    def full(self, now: float) -> Bucket:
        return Bucket(float(self.burst), now)

    def reserve(self, bucket: Bucket, now: float) -> tuple[Bucket, float]:
        """Take one token: the new state and how long the taker must wait for it."""
        elapsed = max(0.0, now - bucket.at)
        tokens = min(float(self.burst), bucket.tokens + elapsed * self.rate) - 1.0
        wait = 0.0 if tokens >= 0 else -tokens / self.rate
        return Bucket(tokens, max(now, bucket.at)), wait


class RateLimiter:
    """Tracks failures per key; :meth:`when` answers the delay before the key's next try."""

    def __init__(self, backoff: Backoff | None = None, bucket: BucketLimit | None = None) -> None:
        self.backoff = backoff or Backoff()
        self.limit = bucket or BucketLimit()
        self._failures: dict[Hashable, int] = {}
        self._bucket: Bucket | None = None

    def when(self, key: Hashable, now: float) -> float:
        """Record one more failure of ``key`` and return how long it should wait."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        if self._bucket is None:
            self._bucket = self.limit.full(now)
        self._bucket, bucket_wait = self.limit.reserve(self._bucket, now)
        return max(self.backoff.delay(failures), bucket_wait)

    def retries(self, key: Hashable) -> int:
        """How many times ``key`` failed since it was last forgotten."""
        return self._failures.get(key, 0)

    def forget(self, key: Hashable) -> None:
        """The key succeeded: its next failure starts the backoff afresh."""
        self._failures.pop(key, None)
