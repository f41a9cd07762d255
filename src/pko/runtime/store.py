"""The informer's cache of one kind: objects by key, secondary indexes, and the diff a relist produces.

Controllers read from here instead of the API server ("get the Stack", "the Stacks whose
``spec.programRef.name`` is X"), so every read is answered from memory and is as fresh as the watch. The store
also turns a full relist into the events the watch missed (adds, updates, and deletions of objects that vanished
meanwhile), which is what makes recovering from ``410 Gone`` lossless.

Pure data structure: no I/O, no clocks, no callbacks. It keeps each object packed and hands every reader a copy
of its own; an event's object is the one the watch decoded, shared by the handlers, who must treat it as
read-only.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping
from typing import Literal, NamedTuple

from pko.kube import objects

Indexer = Callable[[objects.Object], Iterable[str]]
"""Index values of an object, e.g. ``lambda o: [o["spec"]["programRef"]["name"]]``."""

NAMESPACE_INDEX = "namespace"

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


class Event:
    """A change of one object, as seen by the cache. ``old`` is the previous state for ``MODIFIED``: decoded from the
    store's packed copy the first time a handler reads it (most handlers of a change read it; each only once)."""

    __slots__ = ("_old", "_packed_old", "object", "type")

    def __init__(self, type: EventType, object: objects.Object,
                 old: objects.Object | None = None, *, packed_old: bytes | None = None) -> None:
        self.type = type
        self.object = object
        self._old = old
        self._packed_old = packed_old

    @property
    def old(self) -> objects.Object | None:
        if self._old is None and self._packed_old is not None:
            self._old, self._packed_old = objects.unpack(self._packed_old), None
        return self._old

    @property
    def key(self) -> objects.ObjectKey:
        return objects.key_of(self.object)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return (self.type, self.object, self.old) == (other.type, other.object, other.old)

    __hash__ = None  # type: ignore[assignment]  # mutable (its old state is decoded on demand), as a dataclass's

    def __repr__(self) -> str:
        return f"Event({self.type!r}, {self.object!r}, old={self.old!r})"


def by_namespace(obj: objects.Object) -> list[str]:
    return [objects.namespace_of(obj)]


class _Held(NamedTuple):
    """One object as the store keeps it."""

    packed: bytes | None  # msgpack: a fraction of the decoded tree's memory
    plain: objects.Object | None  # only for an object msgpack cannot carry (an integer beyond 64 bits)
    version: str | None  # its resourceVersion, for a relist's comparison
    values: tuple[tuple[str, ...], ...]  # what each indexer gave it, in the order of the indexers
    uid: str | None = None  # which object of that name it is, for a relist's comparison


def _thaw(held: _Held) -> objects.Object:
    """A copy of the held object, the caller's own."""
    if held.packed is not None:
        return objects.unpack(held.packed)
    assert held.plain is not None
    return objects.clone(held.plain)


class Store:
    """The objects of one kind by key, kept packed (msgpack): a decoded object takes four to five times the memory
    of its packed bytes, and at 1,000 Stacks the four kinds the operator caches were most of what its memory grew
    by. Every read decodes a copy the caller owns (the cached client needed one anyway); the indexes are computed
    once, when an object is stored."""

    def __init__(self, indexers: Mapping[str, Indexer] | None = None) -> None:
        self._items: dict[objects.ObjectKey, _Held] = {}
        self._indexers: dict[str, Indexer] = {NAMESPACE_INDEX: by_namespace, **(indexers or {})}
        self._indexes: dict[str, dict[str, set[objects.ObjectKey]]] = {name: {} for name in self._indexers}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def get(self, key: objects.ObjectKey) -> objects.Object | None:
        """A copy of the object at `key` (None: not held)."""
        held = self._items.get(key)
        return None if held is None else _thaw(held)

    def version_of(self, key: objects.ObjectKey) -> str | None:
        """The resourceVersion of the object at `key` (None: not held), without a copy of it."""
        held = self._items.get(key)
        return None if held is None else held.version

    def keys(self) -> list[objects.ObjectKey]:
        return list(self._items)

    def list(self, namespace: str | None = None) -> list[objects.Object]:
        if namespace is None:
            return [_thaw(held) for held in self._items.values()]
        return self.by_index(NAMESPACE_INDEX, namespace)

    def by_index(self, index: str, value: str) -> builtins.list[objects.Object]:
        """Copies of the objects whose ``index`` indexer yields ``value``. Raises ``KeyError`` for an unknown
        index."""
        keys = self._indexes[index].get(value, set())
        return [_thaw(self._items[k]) for k in sorted(keys)]

    def add_indexer(self, name: str, indexer: Indexer) -> None:
        """Add an index (also over the objects already held)."""
        if name in self._indexers:
            raise ValueError(f"index {name!r} exists already")
        self._indexers[name] = indexer
        self._indexes[name] = {}
        for key, held in self._items.items():
            values = tuple(indexer(_thaw(held)))
            self._items[key] = held._replace(values=(*held.values, values))
            self._index(name, key, values)

    def _index(self, name: str, key: objects.ObjectKey, values: Iterable[str]) -> None:
        for value in values:
            self._indexes[name].setdefault(value, set()).add(key)

    def _unindex(self, key: objects.ObjectKey, held: _Held) -> None:
        for name, values in zip(self._indexers, held.values, strict=True):
            index = self._indexes[name]
            for value in values:
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    def _hold(self, obj: objects.Object) -> _Held:
        values = tuple(tuple(indexer(obj)) for indexer in self._indexers.values())
        version = objects.resource_version_of(obj)
        packed = objects.pack(obj)
        return _Held(packed, obj if packed is None else None, version, values,
                     (obj.get("metadata") or {}).get("uid"))

    def upsert(self, obj: objects.Object) -> Event:
        """Store ``obj``; the event is ``ADDED`` or ``MODIFIED`` (with the previous state). ``obj`` itself is not
        kept: the caller may hand it on (the event carries it)."""
        key = objects.key_of(obj)
        old = self._items.get(key)
        if old is not None:
            self._unindex(key, old)
        held = self._items[key] = self._hold(obj)
        for name, values in zip(self._indexers, held.values, strict=True):
            self._index(name, key, values)
        if old is None:
            return Event("ADDED", obj)
        return Event("MODIFIED", obj, old.plain, packed_old=old.packed)

    def delete(self, obj: objects.Object) -> Event:
        """Drop the object with ``obj``'s key; the event carries ``obj`` (the server's final state)."""
        key = objects.key_of(obj)
        old = self._items.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        return Event("DELETED", obj)

    def replace(self, items: Iterable[objects.Object]) -> builtins.list[Event]:
        """Make the store hold exactly ``items`` (a fresh list) and return what changed: objects that are new,
        whose resourceVersion differs, or that are gone (``DELETED`` with their last known state). An object
        deleted and made again under the same name while the watch was down (another uid) is told as the one's
        ``DELETED`` and the other's ``ADDED``, as a watch would have told them: not as a change of one object,
        which predicates on generation would let by (a new object's generation starts at 1 again)."""
        fresh = {objects.key_of(obj): obj for obj in items}
        changes: builtins.list[Event] = []
        for key in [k for k in self._items if k not in fresh]:
            changes.append(self.delete(_thaw(self._items[key])))
        for key, obj in fresh.items():
            old = self._items.get(key)
            if old is not None and old.version == objects.resource_version_of(obj):
                continue
            if old is not None and old.uid != (obj.get("metadata") or {}).get("uid"):
                changes.append(self.delete(_thaw(old)))
            changes.append(self.upsert(obj))
        return changes
