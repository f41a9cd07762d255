"""Skipping a server-side apply that would change nothing: what this process last applied, and whether it holds.

Why: a controller re-applies the objects it owns on every reconcile (the Stack its Workspace, the Workspace its
Service and StatefulSet), and an object reconciles several times while it settles; the apply is idempotent but
each one is a request (and an etcd write when the server adds nothing). An :class:`Applied` remembers the digest of
what was applied per key and the generation the API server answered with; the next apply of the same manifests is
skipped while the object's generation in the informer's cache is still that one (nobody changed its spec since),
its metadata in the cache still carries the labels, annotations and owner references the manifest sets (a change
there bumps no generation), and the record is younger than `reapply_after` (what the cache cannot show, such as
another object applied with it, comes back eventually; an object deleted behind our back is seen by its watch).

Pure bookkeeping: no I/O; the clock is passed in.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from pko.kube import objects

#: However unchanged, an object is applied again after this long.
REAPPLY_AFTER = 300.0

#: What a manifest sets in an object's metadata that no generation counts: ``("label", key, value)``,
#: ``("annotation", key, value)`` and ``("owner", uid, "")`` entries.
Marks = frozenset[tuple[str, str, str]]


def marks(manifest: objects.Object) -> Marks:
    """The labels, annotations and owner references `manifest` sets."""
    meta = objects.metadata(manifest)
    return frozenset(
        [("label", k, str(v)) for k, v in (meta.get("labels") or {}).items()]
        + [("annotation", k, str(v)) for k, v in (meta.get("annotations") or {}).items()]
        + [("owner", str(ref.get("uid") or ""), "") for ref in meta.get("ownerReferences") or ()
           if isinstance(ref, dict)]
    )


def carries(obj: objects.Object, wanted: Marks) -> bool:
    """Whether `obj`'s metadata still has every one of `wanted` (others' labels and annotations may be added)."""
    if not wanted:
        return True
    return wanted <= marks(obj)


def digest(*manifests: dict[str, Any]) -> str:
    """A digest of manifests as they would be sent."""
    return hashlib.sha256(json.dumps(manifests, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Record:
    """What was last applied for a key: the manifests' digest, the generation the API server answered with, when
    (the caller's clock, seconds), and the metadata the cached object must still carry (:func:`marks`)."""

    digest: str
    generation: int | None
    at: float
    marks: Marks = frozenset()

    def still_holds(self, digest_: str, cached: objects.Object, now: float, reapply_after: float = REAPPLY_AFTER
                    ) -> bool:
        return (digest_ == self.digest and objects.generation_of(cached) == self.generation
                and now - self.at < reapply_after and carries(cached, self.marks))


class Applied:
    """Records by key."""

    def __init__(self, reapply_after: float = REAPPLY_AFTER) -> None:
        self._records: dict[objects.ObjectKey, Record] = {}
        self.reapply_after = reapply_after

    def holds(self, key: objects.ObjectKey, digest_: str, cached: objects.Object | None, now: float) -> bool:
        """Whether applying manifests of `digest_` for `key` again would change nothing (`cached`: the object's
        current state in the cache, None when unknown)."""
        last = self._records.get(key)
        return last is not None and cached is not None and last.still_holds(digest_, cached, now, self.reapply_after)

    def last(self, key: objects.ObjectKey) -> Record | None:
        return self._records.get(key)

    def record(self, key: objects.ObjectKey, digest_: str, applied: objects.Object, now: float,
               manifest: objects.Object | None = None) -> None:
        """Remember an apply; with `manifest` (the one whose object the cache is asked about), its :func:`marks`."""
        self._records[key] = Record(digest_, objects.generation_of(applied), now,
                                    marks(manifest) if manifest is not None else frozenset())

    def forget(self, key: objects.ObjectKey) -> None:
        self._records.pop(key, None)
