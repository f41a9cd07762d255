"""The informer: keeps a :class:`pko.runtime.store.Store` of one kind in step with the API server.

List, then watch from the list's resourceVersion (with bookmarks, so an idle watch still advances); on
``410 Gone`` list again and let the store's diff deliver whatever the watch missed, deletions included; on any
other error back off and resume the watch from the last version seen. Event handlers are plain synchronous
callables (typically "map to keys and add to a queue"); a handler added late first receives the objects
already cached as ``ADDED`` events, as client-go's shared informers do.

One informer per kind is shared by every controller of a manager (see :mod:`pko.runtime.manager`). The informer
must never block in a handler, never write to the API server, and never hand out objects it will mutate: the
store replaces objects, it never edits them in place.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping

from pko import kube
from pko.kube import resources
from pko.runtime import store

log = logging.getLogger(__name__)

Handler = Callable[[store.Event], None]
Transform = Callable[[kube.Object], kube.Object]
ABSENT_RETRY = 300.0  # an optional kind the API server does not serve is looked for again this often


def strip_managed_fields(obj: kube.Object) -> kube.Object:
    """Drop ``metadata.managedFields`` (often most of an object's bytes; controllers never read them)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


class Informer:
    def __init__(
        self,
        client: kube.Client,
        kind: resources.Kind,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        selector: str | None = None,
        indexers: Mapping[str, store.Indexer] | None = None,
        resource_version: str | None = None,
        transform: Transform | None = strip_managed_fields,
        min_watch_timeout: int = 300,
        max_backoff: float = 30.0,
        optional: bool = False,
    ) -> None:
        """Watch ``kind`` in ``namespace`` (``None``: all namespaces). With ``resource_version`` the informer
        starts by resuming a watch from that version instead of listing (a version the server no longer keeps
        makes it list, as after any ``410 Gone``). ``selector`` is a label selector the API server filters by (an
        object relabelled out of it is delivered as deleted). ``transform`` is applied to every object before it is
        cached (by default it drops ``managedFields``; ``None`` caches objects as served). An ``optional`` kind may be
        missing from the API server (a pko-only CRD not installed): the informer then says so once and looks again
        every :data:`ABSENT_RETRY` seconds, quietly."""
        self.client = client
        self.kind = kind
        self.namespace = namespace
        self.labels = dict(labels) if labels else None
        self.selector = selector or None
        self.store = store.Store(indexers)
        self.resource_version = resource_version
        self.relists = 0
        self._transform = transform or (lambda obj: obj)
        self._min_watch_timeout = min_watch_timeout
        self._max_backoff = max_backoff
        self.optional = optional
        self.absent = False
        self._handlers: list[Handler] = []
        self._synced = asyncio.Event()

    def __repr__(self) -> str:
        return f"<Informer {self.kind.kind} in {self.namespace or 'all namespaces'}>"

    @property
    def synced(self) -> bool:
        """True once the store holds a complete list (it stays true across relists), or an optional kind is not
        served (nothing to wait for: readiness does not hang on a CRD that is not installed)."""
        return self._synced.is_set() or self.absent

    async def wait_synced(self) -> None:
        await self._synced.wait()

    def add_indexer(self, name: str, indexer: store.Indexer) -> None:
        self.store.add_indexer(name, indexer)

    def add_handler(self, handler: Handler) -> None:
        """Call ``handler`` for every change from now on, after replaying the cached objects as ``ADDED``."""
        self._handlers.append(handler)
        for obj in self.store.list():
            self._call(handler, store.Event("ADDED", obj))

    def remove_handler(self, handler: Handler) -> None:
        if handler in self._handlers:
            self._handlers.remove(handler)

    def _emit(self, event: store.Event) -> None:
        for handler in list(self._handlers):
            self._call(handler, event)

    def _call(self, handler: Handler, event: store.Event) -> None:
        try:
            handler(event)
        except Exception:  # a broken handler must not stop the cache for everyone else
            log.exception("%r: event handler failed on %s %s", self, event.type, event.key)

    async def run(self) -> None:
        """Keep the store in step until cancelled."""
        failures = 0
        while True:
            try:
                if self.resource_version is None:
                    await self._list()
                await self._watch()
                failures = 0
            except kube.Gone:
                log.info("%r: resourceVersion %s is gone; relisting", self, self.resource_version)
                self.resource_version = None
                failures = 0
            except kube.NotFound as err:
                if not self.optional:
                    failures += 1
                    await self._back_off(err, failures)
                    continue
                if not self.absent:
                    log.info("%r: the API server does not serve this kind; looking again every %.0fs", self,
                             ABSENT_RETRY)
                    for event in self.store.replace([]):  # a CRD removed while served: its objects went with it
                        self._emit(event)
                    self.resource_version = None
                self.absent = True
                await asyncio.sleep(ABSENT_RETRY)
            except Exception as err:  # API errors, transport errors (httpx2), decoding errors: back off, resume
                failures += 1
                await self._back_off(err, failures)

    async def _back_off(self, err: Exception, failures: int) -> None:
        delay = min(self._max_backoff, 0.8 * 2 ** min(failures - 1, 10)) * random.uniform(1.0, 1.2)
        log.warning("%r: %s: %s; retrying in %.1fs", self, type(err).__name__, err, delay)
        await asyncio.sleep(delay)

    async def _list(self) -> None:
        listing = await self.client.list(self.kind, self.namespace, labels=self.labels, selector=self.selector)
        self.relists += 1
        self.absent = False
        changes = self.store.replace([self._transform(obj) for obj in listing.items])
        self.resource_version = listing.resource_version
        self._synced.set()
        for event in changes:
            self._emit(event)

    async def _watch(self) -> None:
        timeout = random.randint(self._min_watch_timeout, 2 * self._min_watch_timeout)
        async for event in self.client.watch(
            self.kind, self.namespace, resource_version=self.resource_version, labels=self.labels,
            selector=self.selector, timeout_seconds=timeout,
        ):
            if event.type == "BOOKMARK":
                pass
            elif event.type == "DELETED":
                self._emit(self.store.delete(self._transform(event.object)))
            elif event.type in ("ADDED", "MODIFIED"):
                self._emit(self.store.upsert(self._transform(event.object)))
            self.resource_version = event.resource_version or self.resource_version
            # A resumed informer counts as synced once its watch delivers (it never listed).
            self._synced.set()
