"""The work queue between event handlers and reconcile workers (client-go's rate-limited delaying queue).

Guarantees the controllers rely on:

* a key waiting in the queue is there once, however often it is added (dedupe);
* a key is handed to at most one worker at a time; adding it while it is being processed defers it until
  :meth:`WorkQueue.done` (so one object is never reconciled by two workers concurrently, and a change seen during
  a reconcile still triggers one more);
* :meth:`WorkQueue.add_after` adds a key later (the earliest pending deadline of a key wins);
* :meth:`WorkQueue.add_rate_limited` adds it after the :mod:`pko.runtime.ratelimit` backoff for that key.

Single event loop, no threads, no locks: every method except :meth:`WorkQueue.get` is synchronous and safe to
call from event handlers. The queue must never call back into reconcilers; it only hands out keys.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from pko.runtime import ratelimit

K = TypeVar("K", bound=Hashable)


class QueueMetrics(Protocol):
    """What the queue reports (implemented by :mod:`pko.runtime.metrics`; the default reports nothing)."""

    def added(self) -> None: ...

    def depth(self, depth: int) -> None: ...

    def retried(self) -> None: ...

    def started(self, waited: float) -> None: ...

    def finished(self, worked: float) -> None: ...


class _NoMetrics:
    def added(self) -> None:
        pass

    def depth(self, depth: int) -> None:
        pass

    def retried(self) -> None:
        pass

    def started(self, waited: float) -> None:
        pass

    def finished(self, worked: float) -> None:
        pass


class ShutDown(Exception):
    """The queue was shut down while waiting for a key."""


class WorkQueue(Generic[K]):
    def __init__(
        self, rate_limiter: ratelimit.RateLimiter | None = None, metrics: QueueMetrics | None = None
    ) -> None:
        self.rate_limiter = rate_limiter or ratelimit.RateLimiter()
        self._metrics: QueueMetrics = metrics or _NoMetrics()
        self._queue: collections.deque[K] = collections.deque()
        self._dirty: set[K] = set()
        self._processing: dict[K, float] = {}
        self._added_at: dict[K, float] = {}
        self._delayed: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        #: workers waiting for a key, each woken alone when one comes (an Event woke every idle worker of the
        #: controller for each key, 25 of them by default, all but one to wait again: at fleet scale that was most
        #: of the event loop's task switches)
        self._getters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._shutting_down = False

    def __len__(self) -> int:
        """Keys ready to be handed out (not counting those being processed or delayed)."""
        return len(self._queue)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def is_processing(self, key: K) -> bool:
        return key in self._processing

    def unfinished_work(self, now: float | None = None) -> tuple[float, float]:
        """Seconds spent so far by the keys being processed: ``(total, longest)``."""
        now = time.monotonic() if now is None else now
        spans = [now - started for started in self._processing.values()]
        return sum(spans), max(spans, default=0.0)

    def pending_after(self, key: K) -> float | None:
        """The loop time at which a delayed ``key`` will be added, if it is waiting for one."""
        entry = self._delayed.get(key)
        return entry[0] if entry else None

    def add(self, key: K) -> None:
        """Queue ``key`` now (no-op if it already waits; deferred until :meth:`done` while it is processed)."""
        if self._shutting_down:
            return
        if key in self._dirty:
            return
        self._metrics.added()
        self._dirty.add(key)
        self._added_at.setdefault(key, time.monotonic())
        if key in self._processing:
            return
        self._queue.append(key)
        self._metrics.depth(len(self._queue))
        self._wake_one()

    def _wake_one(self) -> None:
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)
                return

    def add_after(self, key: K, delay: float) -> None:
        """Queue ``key`` after ``delay`` seconds; an earlier pending deadline for the key is kept."""
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + delay
        current = self._delayed.get(key)
        if current is not None:
            if current[0] <= deadline:
                return
            current[1].cancel()
        self._delayed[key] = (deadline, loop.call_at(deadline, self._fire, key))

    def drop_after(self, key: K) -> None:
        """Forget a delayed add of ``key``, if one waits: the reconcile that asked for it was overtaken by one that
        found nothing left to look at later (a key already queued stays queued)."""
        entry = self._delayed.pop(key, None)
        if entry is not None:
            entry[1].cancel()

    def _fire(self, key: K) -> None:
        self._delayed.pop(key, None)
        self.add(key)

    def add_rate_limited(self, key: K) -> None:
        """Queue ``key`` after its rate-limited backoff (one more failure counted)."""
        self._metrics.retried()
        self.add_after(key, self.rate_limiter.when(key, time.monotonic()))

    def forget(self, key: K) -> None:
        """Reset ``key``'s backoff (call after it succeeded)."""
        self.rate_limiter.forget(key)

    def retries(self, key: K) -> int:
        return self.rate_limiter.retries(key)

    async def get(self) -> K:
        """The next key to process; the caller must call :meth:`done` with it. Raises :class:`ShutDown`."""
        while not self._queue:
            if self._shutting_down:
                raise ShutDown()
            getter = asyncio.get_running_loop().create_future()
            self._getters.append(getter)
            try:
                await getter
            except asyncio.CancelledError:
                if getter.done() and not getter.cancelled():
                    self._wake_one()  # woken for a key, then cancelled: the key goes to another worker
                raise
        key = self._queue.popleft()
        now = time.monotonic()
        self._dirty.discard(key)
        self._processing[key] = now
        self._metrics.depth(len(self._queue))
        self._metrics.started(now - self._added_at.pop(key, now))
        return key

    def done(self, key: K) -> None:
        """``key`` is no longer processed; if it was added meanwhile, it is queued again now."""
        started = self._processing.pop(key, None)
        if started is not None:
            self._metrics.finished(time.monotonic() - started)
        if key in self._dirty and not self._shutting_down:
            self._queue.append(key)
            self._metrics.depth(len(self._queue))
            self._wake_one()

    def shutdown(self) -> None:
        """Stop handing out keys: waiting and future :meth:`get` calls raise :class:`ShutDown`."""
        self._shutting_down = True
        for _, handle in self._delayed.values():
            handle.cancel()
        self._delayed.clear()
        self._queue.clear()
        self._dirty.clear()
        self._metrics.depth(0)
        while self._getters:
            self._wake_one()  # each finds the queue shut down
