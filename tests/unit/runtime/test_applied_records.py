"""An apply is skipped only while the cached object shows everything it would set: its generation for the spec, its
metadata for the labels, annotations and owner references (which bump no generation); others' additions to the
metadata do not matter."""

from __future__ import annotations

from typing import Any

from pko.kube import objects
from pko.runtime import applied


def _workspace(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
               owners: list[dict[str, Any]] | None = None, generation: int = 2) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "w", "namespace": "ns", "generation": generation}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    if owners is not None:
        meta["ownerReferences"] = owners
    return {"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace", "metadata": meta, "spec": {}}


KEY = objects.ObjectKey("ns", "w")
OWNER = {"apiVersion": "pulumi.com/v1", "kind": "Stack", "name": "w", "uid": "u-1", "controller": True}
MANIFEST = _workspace({"app": "w"}, {"shard-lease": "a"}, [OWNER])


def test_a_record_holds_while_the_metadata_it_set_is_there_whatever_others_added() -> None:
    records = applied.Applied(reapply_after=3600.0)
    digest = applied.digest(MANIFEST)
    records.record(KEY, digest, MANIFEST, now=0.0, manifest=MANIFEST)
    assert records.holds(KEY, digest, MANIFEST, now=10.0)
    crowded = _workspace({"app": "w", "team": "x"}, {"shard-lease": "a", "note": "y"},
                         [OWNER, {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u-2"}])
    assert records.holds(KEY, digest, crowded, now=10.0)
    assert records.holds(KEY, digest, MANIFEST, now=3599.0)  # the caller's own period, not the default


def test_a_record_does_not_hold_once_a_label_annotation_or_owner_it_set_is_gone_or_changed() -> None:
    records = applied.Applied()
    digest = applied.digest(MANIFEST)
    records.record(KEY, digest, MANIFEST, now=0.0, manifest=MANIFEST)
    for edited in (_workspace({}, {"shard-lease": "a"}, [OWNER]),
                   _workspace({"app": "other"}, {"shard-lease": "a"}, [OWNER]),
                   _workspace({"app": "w"}, None, [OWNER]),
                   _workspace({"app": "w"}, {"shard-lease": "b"}, [OWNER]),
                   _workspace({"app": "w"}, {"shard-lease": "a"}, []),
                   _workspace({"app": "w"}, {"shard-lease": "a"}, [OWNER | {"uid": "u-9"}])):
        assert not records.holds(KEY, digest, edited, now=1.0), edited["metadata"]
    assert not records.holds(KEY, digest, _workspace({"app": "w"}, {"shard-lease": "a"}, [OWNER], generation=3),
                             now=1.0)
    assert not records.holds(KEY, digest, MANIFEST, now=applied.REAPPLY_AFTER)


def test_a_record_made_without_its_manifest_looks_at_the_generation_and_the_clock_only() -> None:
    records = applied.Applied()
    digest = applied.digest(MANIFEST)
    records.record(KEY, digest, MANIFEST, now=0.0)
    assert records.holds(KEY, digest, _workspace(), now=1.0)
    assert not records.holds(KEY, digest, None, now=1.0)


def test_marks_are_what_a_manifest_sets_in_its_metadata() -> None:
    assert applied.marks(MANIFEST) == {("label", "app", "w"), ("annotation", "shard-lease", "a"),
                                       ("owner", "u-1", "")}
    assert applied.marks(_workspace()) == frozenset()
    assert applied.carries(_workspace(), frozenset())
