"""Reads from the informers' caches, with read-your-writes: the client the reconcilers use.

Why: a reconcile reads the object it works on and the objects around it (the Stack, its Program, its current
Update, its Workspace) several times per update; as live GETs that was about a third of the operator's API requests
(the first side-by-side benchmark found 1.9 times the Go operator's, which reads from controller-runtime's cache). The
manager's informers hold every object of those kinds already.

The rule that keeps a cached read safe: a reconcile must never act on a state older than one it wrote itself (a
Stack whose `currentUpdate` this process just saved, read back without it, would start a second Update). So the
client records the resourceVersion of every object it writes or deletes, and answers a read from the cache only
when the cached copy is at least that version (resourceVersions are comparable integers, as the API server
guarantees since Kubernetes 1.34's comparable resource versions); otherwise, and for kinds without a synced
informer or objects not in the cache (just created, or out of the informer's namespace), it reads live. Another
client's change not yet in the cache reads as it was a moment ago, as with controller-runtime: its watch event
queues the next reconcile.

It must never hand out the cache's own objects (readers get a copy) and never answer a miss from the cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

from pko.kube import client as kclient
from pko.kube import objects, resources
from pko.runtime import informer

#: Cached objects are fresh once their resourceVersion reaches this; a deleted object never is (read live).
_DELETED = -1
#: The fewest written versions kept before the record is pruned of what the caches caught up with.
PRUNE_AT = 4096
#: How long a written version of an object the cache does not hold is kept (seconds): far longer than a watch lags.
ABSENT_GRACE = 300.0

Lookup = Callable[[resources.Kind], "informer.Informer | None"]


def version(obj: objects.Object | None) -> int | None:
    """An object's resourceVersion as an integer, or None when it has none that reads as one."""
    return _number(((obj or {}).get("metadata") or {}).get("resourceVersion"))


def _number(text: object) -> int | None:
    return int(text) if isinstance(text, str) and text.isdigit() else None


def prunable(written: int, have: int | None, age: float) -> bool:
    """Whether a version this process wrote `age` seconds ago may be forgotten, the cache holding the object at
    version `have` (None: not at all). When the cache holds it at that version or later, a cached read is fresh
    anyway. When the cache does not hold it, the watch may still bring an older copy (an object deleted before
    its creation reached the cache, or written before it did): only after :data:`ABSENT_GRACE` — deleted,
    by this process or by another (a garbage-collected Update) — is the version forgotten."""
    if have is not None:
        return written != _DELETED and have >= written
    return age > ABSENT_GRACE


def fresh(cached: objects.Object, written: int | None) -> bool:
    """Whether a cached copy may answer a read, given the version this process last wrote (None: never wrote)."""
    if written is None:
        return True
    if written == _DELETED:
        return False
    have = version(cached)
    return have is not None and have >= written


class CachedClient(kclient.Client):
    """A :class:`pko.kube.Client` over the same connection whose `get` reads the informers' caches (see the module
    docstring); every write records the version it produced."""

    def __init__(self, base: kclient.Client, lookup: Lookup) -> None:
        super().__init__(base.api, field_manager=base.field_manager, http=base.http)
        self._lookup = lookup
        #: the version this process last wrote of each object, and when (monotonic)
        self._written: dict[tuple[resources.Kind, objects.ObjectKey], tuple[int, float]] = {}
        self._prune_at = PRUNE_AT
        self.clock = time.monotonic
        self.hits = 0
        self.misses = 0

    def _remember(self, kind: resources.Kind, obj: objects.Object) -> None:
        written = version(obj)
        # a kind no informer holds is read live, always (one made later lists what is newer than this write): its
        # writes — the events, above all — need no record
        if written is not None and self._lookup(kind) is not None:
            self._note(kind, objects.key_of(obj), written)

    def _note(self, kind: resources.Kind, key: objects.ObjectKey, written: int) -> None:
        self._written[(kind, key)] = (written, self.clock())
        if len(self._written) >= self._prune_at:
            self._prune()

    def _prune(self) -> None:
        """Forget the versions the caches have caught up with: each write of every object the operator ever wrote
        (an Update for each run, long since gone) was kept, and the record grew with the fleet's churn. Run when
        the record doubled since the last prune: amortised, a dictionary operation a write."""
        now = self.clock()
        for (kind, key), (written, when) in list(self._written.items()):
            source = self._lookup(kind)
            if source is None or not source.synced:
                continue
            if prunable(written, _number(source.store.version_of(key)), now - when):
                del self._written[(kind, key)]
        self._prune_at = max(PRUNE_AT, 2 * len(self._written))

    @property
    def remembered(self) -> int:
        """How many written versions the client keeps."""
        return len(self._written)

    def _cached(self, kind: resources.Kind, name: str, namespace: str | None) -> objects.Object | None:
        source = self._lookup(kind)
        if source is None or not source.synced:
            return None
        key = objects.ObjectKey(namespace or "", name) if kind.namespaced else objects.ObjectKey("", name)
        found = source.store.get(key)  # a copy of our own
        written = self._written.get((kind, key))
        if found is None or not fresh(found, written[0] if written is not None else None):
            return None
        return found

    # --- reading ---------------------------------------------------------------------------------------------

    async def get(self, kind: kclient.KindRef, name: str, namespace: str | None = None) -> objects.Object:
        k = resources.resource(kind)
        cached = self._cached(k, name, namespace)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        found = await super().get(kind, name, namespace)
        self._remember(k, found)  # a live read is as good as a write: never read older than it afterwards
        return found

    # --- writing ---------------------------------------------------------------------------------------------

    async def create(self, obj: objects.Object) -> objects.Object:
        created = await super().create(obj)
        self._remember(resources.of(created), created)
        return created

    async def replace(self, obj: objects.Object) -> objects.Object:
        replaced = await super().replace(obj)
        self._remember(resources.of(replaced), replaced)
        return replaced

    async def replace_status(self, obj: objects.Object) -> objects.Object:
        replaced = await super().replace_status(obj)
        self._remember(resources.of(replaced), replaced)
        return replaced

    async def apply(self, obj: objects.Object, *, field_manager: str | None = None,
                    force: bool = True) -> objects.Object:
        applied = await super().apply(obj, field_manager=field_manager, force=force)
        self._remember(resources.of(applied), applied)
        return applied

    async def apply_status(self, obj: objects.Object, *, field_manager: str | None = None,
                           force: bool = True) -> objects.Object:
        applied = await super().apply_status(obj, field_manager=field_manager, force=force)
        self._remember(resources.of(applied), applied)
        return applied

    async def patch(self, kind: kclient.KindRef, name: str, patch: Any, namespace: str | None = None, *,
                    patch_type: kclient.PatchKind = "merge", status: bool = False) -> objects.Object:
        patched = await super().patch(kind, name, patch, namespace, patch_type=patch_type, status=status)
        self._remember(resources.resource(kind), patched)
        return patched

    async def delete(self, kind: kclient.KindRef, name: str, namespace: str | None = None, *,
                     propagation: Literal["Background", "Foreground", "Orphan"] | None = None,
                     missing_ok: bool = False) -> None:
        k = resources.resource(kind)
        key = objects.ObjectKey(namespace or "", name) if k.namespaced else objects.ObjectKey("", name)
        if self._lookup(k) is not None:
            self._note(k, key, _DELETED)  # until a live read or a write says otherwise
        await super().delete(kind, name, namespace, propagation=propagation, missing_ok=missing_ok)
