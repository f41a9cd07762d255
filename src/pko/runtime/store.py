"""The informer's cache of one kind: objects by key, secondary indexes, and the diff a relist produces.

Controllers read from here instead of the API server ("get the Stack", "the Stacks whose
``spec.programRef.name`` is X"), so every read is answered from memory and is as fresh as the watch. The store
also turns a full relist into the events the watch missed (adds, updates, and deletions of objects that vanished
meanwhile), which is what makes recovering from ``410 Gone`` lossless.

Pure data structure: no I/O, no clocks, no callbacks. The objects it holds are shared with readers, who must
treat them as read-only (copy before changing).
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Literal

from pko.kube import objects

Indexer = Callable[[objects.Object], Iterable[str]]
"""Index values of an object, e.g. ``lambda o: [o["spec"]["programRef"]["name"]]``."""

NAMESPACE_INDEX = "namespace"

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclasses.dataclass(frozen=True)
class Event:
    """A change of one object, as seen by the cache. ``old`` is the previous state for ``MODIFIED``."""

    type: EventType
    object: objects.Object
    old: objects.Object | None = None

    @property
    def key(self) -> objects.ObjectKey:
        return objects.key_of(self.object)


def by_namespace(obj: objects.Object) -> list[str]:
    return [objects.namespace_of(obj)]


class Store:
    def __init__(self, indexers: Mapping[str, Indexer] | None = None) -> None:
        self._items: dict[objects.ObjectKey, objects.Object] = {}
        self._indexers: dict[str, Indexer] = {NAMESPACE_INDEX: by_namespace, **(indexers or {})}
        self._indexes: dict[str, dict[str, set[objects.ObjectKey]]] = {name: {} for name in self._indexers}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def get(self, key: objects.ObjectKey) -> objects.Object | None:
        return self._items.get(key)

    def keys(self) -> list[objects.ObjectKey]:
        return list(self._items)

    def list(self, namespace: str | None = None) -> list[objects.Object]:
        if namespace is None:
            return list(self._items.values())
        return self.by_index(NAMESPACE_INDEX, namespace)

    def by_index(self, index: str, value: str) -> builtins.list[objects.Object]:
        """Objects whose ``index`` indexer yields ``value``. Raises ``KeyError`` for an unknown index."""
        keys = self._indexes[index].get(value, set())
        return [self._items[k] for k in sorted(keys)]

    def add_indexer(self, name: str, indexer: Indexer) -> None:
        """Add an index (also over the objects already held)."""
        if name in self._indexers:
            raise ValueError(f"index {name!r} exists already")
        self._indexers[name] = indexer
        self._indexes[name] = {}
        for key, obj in self._items.items():
            self._index(name, key, obj)

    def _index(self, name: str, key: objects.ObjectKey, obj: objects.Object) -> None:
        for value in self._indexers[name](obj):
            self._indexes[name].setdefault(value, set()).add(key)

    def _unindex(self, key: objects.ObjectKey, obj: objects.Object) -> None:
        for name, indexer in self._indexers.items():
            index = self._indexes[name]
            for value in indexer(obj):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    def upsert(self, obj: objects.Object) -> Event:
        """Store ``obj``; the event is ``ADDED`` or ``MODIFIED`` (with the previous state)."""
        key = objects.key_of(obj)
        old = self._items.get(key)
        if old is not None:
            self._unindex(key, old)
        self._items[key] = obj
        for name in self._indexers:
            self._index(name, key, obj)
        return Event("ADDED", obj) if old is None else Event("MODIFIED", obj, old)

    def delete(self, obj: objects.Object) -> Event:
        """Drop the object with ``obj``'s key; the event carries ``obj`` (the server's final state)."""
        key = objects.key_of(obj)
        old = self._items.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        return Event("DELETED", obj)

    def replace(self, items: Iterable[objects.Object]) -> builtins.list[Event]:
        """Make the store hold exactly ``items`` (a fresh list) and return what changed: objects that are new,
        whose resourceVersion differs, or that are gone (``DELETED`` with their last known state)."""
        fresh = {objects.key_of(obj): obj for obj in items}
        changes: builtins.list[Event] = []
        for key in [k for k in self._items if k not in fresh]:
            changes.append(self.delete(self._items[key]))
        for key, obj in fresh.items():
            old = self._items.get(key)
            if old is not None and objects.resource_version_of(old) == objects.resource_version_of(obj):
                continue
            changes.append(self.upsert(obj))
        return changes
