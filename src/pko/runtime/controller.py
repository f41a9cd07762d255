"""A controller: watches (informer + predicate + mapper) feed a work queue; N workers call ``reconcile(key)``.

``reconcile`` is an ``async`` function of an :class:`pko.kube.objects.ObjectKey` returning a :class:`Result`
(or ``None`` for "done"). Its outcome drives the queue exactly as in controller-runtime:

* returns ``Result(requeue_after=s)`` → the key's backoff is reset and it comes back after ``s`` seconds;
* returns ``Result(requeue=True)`` → it comes back after its rate-limited backoff;
* raises → the same, and the error is logged and counted;
* returns ``None``/``Result()`` → the backoff is reset; the key comes back only with a new event.

Every log line of a reconcile carries ``controller``, ``namespace`` and ``name`` (:mod:`pko.runtime.logcontext`).
A failure the world causes (the API server or an agent saying no, a timeout: :func:`expected`) is logged as one
line; anything else with its traceback.

The queue guarantees that one key is never reconciled by two workers at once. A controller is started by the
manager when it becomes leader and cancelled when leadership ends; each run starts with a fresh queue, filled
by replaying the informers' caches. The controller must never touch the API server itself: reconcilers do.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable

from pko.kube import errors, objects
from pko.runtime import handlers, informer, logcontext, metrics, ratelimit, store, workqueue

log = logging.getLogger(__name__)

# An unreachable API server (restarting, a network blip) is expected too: the message says it all, and a traceback
# per reconcile for each outage buries the log (found by tests/chaos/test_control_plane_restart.py).
_expected: tuple[type[BaseException], ...] = (errors.ApiError, errors.TransportError, TimeoutError, ConnectionError)


def expect(*kinds: type[BaseException]) -> None:
    """Count these exceptions (and errors raised ``from`` them) as expected (e.g. ``grpc.aio.AioRpcError``)."""
    global _expected
    _expected = (*_expected, *(kind for kind in kinds if kind not in _expected))


def expected(err: BaseException) -> bool:
    """Whether `err`, or an error it was explicitly raised from, is an expected kind: its message says it all."""
    cause: BaseException | None = err
    while cause is not None:
        if isinstance(cause, _expected):
            return True
        cause = cause.__cause__
    return False


@dataclasses.dataclass(frozen=True)
class Result:
    requeue_after: float | None = None
    requeue: bool = False


Reconciler = Callable[[objects.ObjectKey], Awaitable[Result | None]]


@dataclasses.dataclass(frozen=True)
class Watch:
    informer: informer.Informer
    mapper: handlers.Mapper
    predicate: handlers.Predicate


def outcome(result: Result | None, error: BaseException | None) -> str:
    """The ``result`` label of ``controller_runtime_reconcile_total`` for an outcome."""
    if error is not None:
        return "error"
    if result is not None and result.requeue_after:
        return "requeue_after"
    if result is not None and result.requeue:
        return "requeue"
    return "success"


class Controller:
    def __init__(
        self,
        name: str,
        reconcile: Reconciler,
        *,
        workers: int = 1,
        rate_limiter: Callable[[], ratelimit.RateLimiter] = ratelimit.RateLimiter,
        metrics: metrics.ControllerMetrics | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("a controller needs at least one worker")
        self.name = name
        self.reconcile = reconcile
        self.workers = workers
        self.watches: list[Watch] = []
        self._new_rate_limiter = rate_limiter
        self._metrics = metrics
        self.queue: workqueue.WorkQueue[objects.ObjectKey] = workqueue.WorkQueue(metrics=metrics)
        self._attach: Callable[[Watch], None] | None = None
        if metrics is not None:
            metrics.workers(workers)
            metrics.watch_progress(lambda: self.queue.unfinished_work())

    def __repr__(self) -> str:
        return f"<Controller {self.name}>"

    def watch(
        self,
        source: informer.Informer,
        mapper: handlers.Mapper = handlers.for_object,
        predicate: handlers.Predicate = handlers.always,
    ) -> Controller:
        """Reconcile ``mapper(event)`` for every event of ``source`` that passes ``predicate``. A watch added
        while the controller runs takes effect once ``source`` is synced (e.g. Flux kinds seen lazily)."""
        watch = Watch(source, mapper, predicate)
        self.watches.append(watch)
        if self._attach is not None:
            self._attach(watch)
        return self

    def _handler(self, watch: Watch, queue: workqueue.WorkQueue[objects.ObjectKey]) -> informer.Handler:
        def handle(event: store.Event) -> None:
            if watch.predicate(event):
                for key in watch.mapper(event):
                    queue.add(key)

        return handle

    async def run(self) -> None:
        """Process keys until cancelled (a fresh queue per run; informers are replayed into it)."""
        queue: workqueue.WorkQueue[objects.ObjectKey] = workqueue.WorkQueue(
            self._new_rate_limiter(), metrics=self._metrics
        )
        self.queue = queue
        registered: list[tuple[informer.Informer, informer.Handler]] = []

        async def attach(watch: Watch) -> None:
            await watch.informer.wait_synced()
            handler = self._handler(watch, queue)
            watch.informer.add_handler(handler)
            registered.append((watch.informer, handler))

        try:
            for watch in self.watches:
                await watch.informer.wait_synced()
            for watch in self.watches:
                await attach(watch)
            async with asyncio.TaskGroup() as group:

                def attach_later(watch: Watch) -> None:
                    group.create_task(attach(watch), name=f"{self.name}-watch-{watch.informer.kind.kind}")

                self._attach = attach_later
                for index in range(self.workers):
                    group.create_task(self._work(queue), name=f"{self.name}-worker-{index}")
        except workqueue.ShutDown:
            pass
        finally:
            self._attach = None
            for source, handler in registered:
                source.remove_handler(handler)
            queue.shutdown()

    async def _work(self, queue: workqueue.WorkQueue[objects.ObjectKey]) -> None:
        task = asyncio.current_task()
        while True:
            if task is not None and task.cancelling():
                # A reconcile swallowed this worker's cancellation (as Python 3.11's wait_for can): stop anyway,
                # or the worker waits on its queue for ever and the controller's shutdown with it.
                raise asyncio.CancelledError
            try:
                key = await queue.get()
            except workqueue.ShutDown:
                return
            try:
                await self.process(queue, key)
            finally:
                queue.done(key)

    async def process(self, queue: workqueue.WorkQueue[objects.ObjectKey], key: objects.ObjectKey) -> None:
        """Reconcile one key and requeue it according to the outcome."""
        started = time.monotonic()
        if self._metrics is not None:
            self._metrics.reconcile_started()
        result: Result | None = None
        error: Exception | None = None
        try:
            with logcontext.scope(controller=self.name, namespace=key.namespace, name=key.name):
                try:
                    result = await self.reconcile(key)
                except Exception as err:
                    error = err
                    log.error("reconcile failed: %s", err, exc_info=None if expected(err) else err)
        except BaseException:  # cancelled (leadership lost, shutdown): not a finished reconcile
            if self._metrics is not None:
                self._metrics.reconcile_cancelled()
            raise
        if self._metrics is not None:
            self._metrics.reconcile_finished(outcome(result, error), time.monotonic() - started)
        if error is not None or (result is not None and result.requeue and not result.requeue_after):
            queue.add_rate_limited(key)
        elif result is not None and result.requeue_after:
            queue.forget(key)
            queue.add_after(key, result.requeue_after)
        else:
            queue.forget(key)
