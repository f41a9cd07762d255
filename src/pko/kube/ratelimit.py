"""A client-side token bucket bounding the operator's request rate to the API server (``--kube-api-qps`` and
``--kube-api-burst``, as controller-runtime managers have).

Why: a fleet of hundreds of Stacks wakes at once after a restart or a resync; without a bound the operator sends
as fast as the event loop goes, and an API server with priority and fairness answers 429s that every caller then
has to retry. The bucket holds `burst` tokens and refills at `qps` a second; each request takes one, waiting for
it when there is none. A request reserves its token before it waits (the bucket may go negative), so requests go
out in the order they asked, like client-go's limiter, and a burst of callers never starves the earliest.

:meth:`TokenBucket.reserve` is pure arithmetic over an injected clock; :meth:`TokenBucket.acquire` only sleeps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class TokenBucket:
    """`qps` tokens a second, at most `burst` saved up (at least one). ``qps <= 0`` means no limit."""

    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(self.burst)
        self._last = clock()
        self.granted = 0  # requests let through (for the operator's metrics)
        self.waited = 0.0  # total seconds requests spent waiting for a token

    @property
    def limited(self) -> bool:
        return self.qps > 0

    def reserve(self) -> float:
        """Take a token now; how many seconds the caller must wait before using it (0: at once)."""
        if not self.limited:
            return 0.0
        self.granted += 1
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def acquire(self) -> None:
        delay = self.reserve()
        if delay > 0:
            self.waited += delay
            await self._sleep(delay)
