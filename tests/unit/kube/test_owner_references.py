"""Owner references: the controller reference controller-runtime writes, and setting it without duplicates."""

from __future__ import annotations

import pytest

from pko.kube import objects, owners

STACK = {"apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": {"name": "s", "namespace": "n", "uid": "u1"}}
OTHER = {"apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": {"name": "t", "namespace": "n", "uid": "u2"}}
WORKSPACE = {"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace", "metadata": {"name": "s", "namespace": "n"}}


def test_controller_reference_blocks_owner_deletion() -> None:
    assert owners.controller_reference(STACK) == {
        "apiVersion": "pulumi.com/v1", "kind": "Stack", "name": "s", "uid": "u1",
        "controller": True, "blockOwnerDeletion": True,
    }


def test_owner_without_uid_is_rejected() -> None:
    with pytest.raises(ValueError, match="uid"):
        owners.owner_reference({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})


def test_set_controller_reference_is_idempotent_and_does_not_mutate() -> None:
    once = owners.set_controller_reference(WORKSPACE, STACK)
    twice = owners.set_controller_reference(once, STACK)
    assert once == twice
    assert "ownerReferences" not in WORKSPACE["metadata"]
    assert owners.controller_of(once) == owners.controller_reference(STACK)
    assert owners.is_controlled_by(once, STACK)
    assert not owners.is_controlled_by(once, OTHER)


def test_second_controller_is_refused() -> None:
    owned = owners.set_controller_reference(WORKSPACE, STACK)
    with pytest.raises(owners.AlreadyOwned):
        owners.set_controller_reference(owned, OTHER)


def test_plain_owner_reference_sits_beside_the_controller() -> None:
    owned = owners.set_owner_reference(owners.set_controller_reference(WORKSPACE, STACK), OTHER,
                                       block_owner_deletion=True)
    refs = owners.references_of(owned)
    assert [r["name"] for r in refs] == ["s", "t"]
    assert refs[1] == {"apiVersion": "pulumi.com/v1", "kind": "Stack", "name": "t", "uid": "u2",
                       "blockOwnerDeletion": True}
    assert owners.is_owned_by(owned, OTHER)
    assert owners.references_of(owners.remove_owner_reference(owned, OTHER)) == refs[:1]


def test_object_key_round_trip() -> None:
    key = objects.key_of(WORKSPACE)
    assert str(key) == "n/s"
    assert objects.ObjectKey.parse("n/s") == key
    assert objects.ObjectKey.parse("cluster-wide") == objects.ObjectKey("", "cluster-wide")
