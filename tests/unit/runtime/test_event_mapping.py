"""Event → key mapping: the object itself, its controller owner of a given kind, arbitrary mappings; predicates."""

from __future__ import annotations

from typing import Any

from pko.kube import ObjectKey, owners, resources
from pko.runtime import handlers
from pko.runtime.store import Event

STACK = {"apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": {"name": "s", "namespace": "n", "uid": "u"}}
STACK2 = {"apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": {"name": "t", "namespace": "n", "uid": "v"}}


def workspace(
    owner: dict[str, Any] | None = None, *, generation: int = 1, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    obj = {"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace",
           "metadata": {"name": "w", "namespace": "n", "generation": generation, "annotations": annotations or {}}}
    return owners.set_controller_reference(obj, owner) if owner else obj


def test_for_object_maps_to_own_key() -> None:
    assert handlers.for_object(Event("ADDED", workspace())) == [ObjectKey("n", "w")]


def test_for_controller_maps_to_the_controlling_owner_of_that_kind_only() -> None:
    mapper = handlers.for_controller(resources.STACK)
    assert mapper(Event("ADDED", workspace(STACK))) == [ObjectKey("n", "s")]
    assert mapper(Event("ADDED", workspace())) == []
    assert handlers.for_controller(resources.PROGRAM)(Event("ADDED", workspace(STACK))) == []
    plain_owner = owners.set_owner_reference(workspace(), STACK)
    assert mapper(Event("ADDED", plain_owner)) == []


def test_for_controller_on_owner_change_maps_to_both_owners() -> None:
    mapper = handlers.for_controller(resources.STACK)
    event = Event("MODIFIED", workspace(STACK2), old=workspace(STACK))
    assert mapper(event) == [ObjectKey("n", "t"), ObjectKey("n", "s")]


def test_for_mapping_unions_old_and_new_without_duplicates() -> None:
    def stacks_of(obj: dict[str, Any]) -> list[ObjectKey]:
        return [ObjectKey("n", s) for s in obj["metadata"]["annotations"].get("stacks", "").split(",") if s]

    mapper = handlers.for_mapping(stacks_of)
    event = Event("MODIFIED", workspace(annotations={"stacks": "a,b,a"}), old=workspace(annotations={"stacks": "b,c"}))
    assert mapper(event) == [ObjectKey("n", "a"), ObjectKey("n", "b"), ObjectKey("n", "c")]


def test_generation_changed_ignores_status_only_updates() -> None:
    assert handlers.generation_changed(Event("ADDED", workspace()))
    assert handlers.generation_changed(Event("DELETED", workspace()))
    assert not handlers.generation_changed(Event("MODIFIED", workspace(generation=1), old=workspace(generation=1)))
    assert handlers.generation_changed(Event("MODIFIED", workspace(generation=2), old=workspace(generation=1)))


def test_annotation_changed_and_combinators() -> None:
    changed = handlers.annotation_changed("pulumi.com/reconciliation-request")
    same = Event("MODIFIED", workspace(), old=workspace())
    bumped = Event("MODIFIED", workspace(annotations={"pulumi.com/reconciliation-request": "x"}), old=workspace())
    assert not changed(same)
    assert changed(bumped)
    either = handlers.any_of(handlers.generation_changed, changed)
    assert either(bumped)
    assert not either(same)
    assert handlers.all_of(handlers.always, handlers.negate(handlers.deleted))(same)
