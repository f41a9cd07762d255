"""A Workspace's StatefulSet, built once for each revision: a memo the Workspace reconciler keeps.

Why: each reconcile of a Workspace built its StatefulSet anew (the spec with its defaults, the pod template merged
in, the owner reference), some 0.3 ms of CPU each, about six times a Stack as a pool of active workspaces turns over:
3.4% of the operator's CPU in a profile of 200 Stacks. What it is built from changes far less often: the Workspace's
spec (a custom resource's generation moves with every change of its spec), its name and uid, the pod revision, the
labels the shard carries and the operator's default env. Those are the key. A Workspace without a uid or a
generation (never one the API server made) is built every time. The replicas are not in the key: a Workspace that
sleeps (0) and wakes (1) is the same build, and each copy gets the replicas asked for (keyed by them too, nearly
every Stack in a turning pool was built twice).

Every caller gets its own copy: a runtime may change what it is given, and the kept one must stay as built. The
copy shares the strings of the kept one (:func:`objects.clone`): a round trip through msgpack is faster but makes
every string anew, and the 1,000-Stack runs with it peaked 3-4 MB higher (151, 152 MB against 148; target 150).

The pod digest (:func:`manifests.pod_digest`: the spec serialised, canonical JSON, hashed) is kept the same way by
:class:`Digests`, keyed by the Workspace's uid and generation: each reconcile needs it, and it was 1% of the
operator's CPU in a fleet of 200.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Generic, TypeVar

from pko.api import workspace as ws_api
from pko.kube import objects

KEPT = 256
"""StatefulSets kept, the least recently used dropped first: the active pool's and those about to sleep or wake."""

Manifest = dict[str, Any]
V = TypeVar("V")


def key(workspace: ws_api.Workspace, *, pod_generation: int, carried: Mapping[str, str],
        default_env: Mapping[str, str]) -> Hashable | None:
    """What the StatefulSet of `workspace` is built from (None: not to be kept)."""
    meta = workspace.metadata
    if not meta.uid or meta.generation is None:
        return None
    return (meta.uid, meta.namespace, meta.name, meta.generation, pod_generation,
            tuple(sorted(carried.items())), tuple(sorted(default_env.items())))


class _Kept(Generic[V]):
    """Values by key, at most `kept` of them, the least recently used dropped first."""

    def __init__(self, kept: int) -> None:
        self.kept = kept
        self._values: collections.OrderedDict[Hashable, V] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._values)

    def get(self, found: Hashable | None, make: Callable[[], V]) -> V:
        """The value kept under `found`, made with `make` the first time (every time for None)."""
        if found is None:
            return make()
        value = self._values.get(found)
        if value is None:
            value = self._values[found] = make()
            while len(self._values) > self.kept:
                self._values.popitem(last=False)
        else:
            self._values.move_to_end(found)
        return value


class Built:
    """Manifests by key, at most `kept` of them."""

    def __init__(self, kept: int = KEPT) -> None:
        self._kept: _Kept[Manifest] = _Kept(kept)

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, found: Hashable | None, build: Callable[[], Manifest], *, replicas: int) -> Manifest:
        """A copy of the manifest kept under `found`, built with `build` the first time (every time for None), with
        `replicas`."""
        manifest = build() if found is None else objects.clone(self._kept.get(found, build))
        manifest["spec"]["replicas"] = replicas
        return manifest


class Digests:
    """A value computed from a Workspace's spec, kept by uid and generation (at most `kept`)."""

    def __init__(self, compute: Callable[[ws_api.Workspace], str], kept: int = KEPT) -> None:
        self.compute = compute
        self._kept: _Kept[str] = _Kept(kept)

    def get(self, workspace: ws_api.Workspace) -> str:
        meta = workspace.metadata
        found = (meta.uid, meta.generation) if meta.uid and meta.generation is not None else None
        return self._kept.get(found, lambda: self.compute(workspace))
