"""Which objects this operator reconciles when several operators share a cluster: Flux's sharding scheme.

Why: one operator process has one event loop, one pool of workspaces and one API budget; a fleet of thousands of
Stacks is split between operator replicas by a label, as Flux splits its sources and Kustomizations. A Stack
labelled ``sharding.fluxcd.io/key: <shard>`` is reconciled by the operator started with ``--shard-key <shard>``;
the operator of the default shard watches ``!sharding.fluxcd.io/key`` (objects with no shard label); an operator
with neither flag watches everything, as the Go operator does. ``--watch-label-selector`` takes any selector, as
Flux's controllers do.

The selector filters the informers of the kinds a shard owns (Stacks, Workspaces, Updates), so the API server sends
an operator only its own objects. What a Stack creates carries the Stack's labels that the selector looks at
(:meth:`Shard.carried`): the shard label, and with a custom ``--watch-label-selector`` (``team=a``) the labels it
names, or the operator would never see the Workspace and Updates of the Stacks it reconciles. Its workspace
StatefulSets carry them too, so an operator watches only its own shard's StatefulSets, never the rest of the
cluster's (:func:`statefulset_selector`).

Every reconciler also checks :meth:`Shard.owns` on the object it reads, because a read that misses the cache goes to
the API server, which would hand it an object of another shard (one that was relabelled away a moment ago).
Programs are read by every shard (a Stack may use a Program of the default shard) and reconciled, served and given
an artifact URL by the one shard that owns them.

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from pko.api import names
from pko.kube import selectors

#: DNS-1123 label: a shard names a Lease, a Deployment and a Service.
_SHARD_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class ShardError(ValueError):
    """A shard name or watch selector the operator cannot run with."""


def check_shard_name(name: str) -> str:
    """`name` if it may name a shard; else :class:`ShardError` saying why."""
    if not _SHARD_NAME.match(name):
        raise ShardError(f"invalid shard name {name!r}: a shard names a Lease and a Deployment, so it must be at "
                         "most 63 lowercase letters, digits and '-', beginning and ending with a letter or digit")
    return name


def shard_selector(name: str) -> str:
    """The watch selector of shard `name`."""
    return f"{names.LABEL_SHARD_KEY} in ({check_shard_name(name)})"


#: The watch selector of the default shard, beside named shards: objects without a shard label.
DEFAULT_SHARD_SELECTOR = f"!{names.LABEL_SHARD_KEY}"


@dataclass(frozen=True)
class Shard:
    """The objects this operator reconciles. `name` is the shard's (``--shard-key``; None for the default shard,
    a custom selector or no sharding); `selector` the parsed watch selector (empty: everything)."""

    selector: selectors.Selector
    name: str | None = None

    @property
    def text(self) -> str | None:
        """The selector as the API server takes it (None: no selector)."""
        return self.selector.text or None

    @property
    def everything(self) -> bool:
        return not self.selector.requirements

    def owns(self, obj: Mapping[str, object] | None) -> bool:
        """Whether `obj` (an object as served) is this operator's to reconcile."""
        if obj is None:
            return False
        meta = obj.get("metadata")
        labels = meta.get("labels") if isinstance(meta, dict) else None
        return self.selector.matches(labels if isinstance(labels, dict) else None)

    def owns_labels(self, labels: Mapping[str, str] | None) -> bool:
        return self.selector.matches(labels)

    @property
    def carried_keys(self) -> frozenset[str]:
        """The label keys a Stack's Workspace and Updates take from it: the shard label's, and every key this
        operator's selector looks at."""
        return frozenset({names.LABEL_SHARD_KEY, *(r.key for r in self.selector.requirements)})

    def carried(self, owner_labels: Mapping[str, str] | None) -> dict[str, str]:
        """The labels of a Stack (`owner_labels`) that its Workspace and Updates carry, so that this operator's
        watches select them as they select the Stack."""
        keys = self.carried_keys
        return {k: v for k, v in (owner_labels or {}).items() if k in keys}

    def carried_patch(self, owner_labels: Mapping[str, str] | None) -> dict[str, str | None]:
        """A merge patch of ``metadata.labels`` giving an object the carried labels of `owner_labels` (None removes
        one the owner does not have)."""
        found = owner_labels or {}
        return {k: found.get(k) for k in sorted(self.carried_keys)}

    def lease_name(self, default: str) -> str:
        """The leader-election Lease of this shard's replicas: shards elect their leaders independently. The default
        shard and an operator that watches everything elect on `default`; an operator with another
        ``--watch-label-selector`` (``team=a``) on a Lease named after its selector, so that two operators that run
        different Stacks never take turns on one Lease (their replicas, started alike, share theirs)."""
        if self.name is None and not self.everything and self.selector.requirements != _DEFAULT_SHARD.requirements:
            return f"{default}-{_digest(self.selector)}"
        return lease_name(default, self.name)

    def describe(self) -> str:
        if self.name is not None:
            return f"shard {self.name}"
        return "every object" if self.everything else f"objects matching {self.selector.text!r}"


EVERYTHING = Shard(selectors.parse(""))
_DEFAULT_SHARD = selectors.parse(DEFAULT_SHARD_SELECTOR)


def _digest(selector: selectors.Selector) -> str:
    """Ten hex digits naming a selector by what it selects (the order and spacing of its text do not count)."""
    canonical = ";".join(sorted(f"{r.key} {r.op} {','.join(sorted(r.values))}" for r in selector.requirements))
    return hashlib.sha256(canonical.encode()).hexdigest()[:10]


def lease_name(default: str, shard_name: str | None) -> str:
    """The leader-election Lease of shard `shard_name`'s replicas (None: the default shard's, the unsharded name)."""
    return default if shard_name is None else f"{default}-{shard_name}"


def shard(*, shard_key: str | None = None, watch_label_selector: str | None = None) -> Shard:
    """The shard of ``--shard-key`` or ``--watch-label-selector`` (at most one of them), or :data:`EVERYTHING`."""
    if shard_key and watch_label_selector:
        raise ShardError("--shard-key and --watch-label-selector both choose what this operator reconciles: give one "
                         f"(--shard-key {shard_key} is --watch-label-selector '{shard_selector(shard_key)}')")
    if shard_key:
        return Shard(selectors.parse(shard_selector(shard_key)), shard_key)
    if watch_label_selector:
        try:
            return Shard(selectors.parse(watch_label_selector))
        except selectors.SelectorError as err:
            raise ShardError(f"invalid --watch-label-selector: {err}") from None
    return EVERYTHING


def statefulset_selector(shard: Shard) -> str:
    """The watch selector of an operator's workspace StatefulSets: those of Workspaces (the reference's component
    label), and of this operator's shard only."""
    own = f"{names.LABEL_AUTO_COMPONENT}={names.COMPONENT_WORKSPACE}"
    return f"{own},{shard.text}" if shard.text else own
