"""Deep copies of plain-dict objects (pko.kube.objects.clone, copy_decoded) and the copies the strategic merge and
owner references make with them: what a caller gets is its own, all the way down, and nothing it was given changes."""

from __future__ import annotations

import copy
import json

import pytest

from pko.kube import objects, owners, patchmeta, smp

STACK = {"apiVersion": "pulumi.com/v1", "kind": "Stack",
         "metadata": {"name": "s", "namespace": "ns", "uid": "u-1", "labels": {"a": "b"}, "finalizers": ["f"]},
         "spec": {"stack": "dev", "config": {"k": "v"}, "replicas": 2, "ratio": 0.5, "on": True, "off": None,
                  "envs": [{"name": "A", "value": "1"}, {"name": "B", "nested": {"deep": [1, 2.5, "x"]}}]}}


def _containers(obj: object) -> list[int]:
    """The ids of every dict and list inside `obj`."""
    found: list[int] = []
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.append(id(item))
            stack.extend(item.values())
        elif isinstance(item, list):
            found.append(id(item))
            stack.extend(item)
    return found


@pytest.mark.parametrize("copier", [objects.clone, objects.copy_decoded])
def test_a_copy_is_equal_and_shares_no_dict_or_list(copier: object) -> None:
    copied = copier(STACK)  # type: ignore[operator]
    assert copied == STACK
    assert json.dumps(copied, sort_keys=True) == json.dumps(STACK, sort_keys=True)  # 2 stays 2, 0.5 stays 0.5
    assert not set(_containers(copied)) & set(_containers(STACK))
    copied["spec"]["envs"][1]["nested"]["deep"].append("changed")
    assert STACK["spec"]["envs"][1]["nested"]["deep"] == [1, 2.5, "x"]  # type: ignore[index]


def test_clone_keeps_every_type_and_copy_decoded_falls_back_to_it() -> None:
    odd = {"t": (1, [2]), "s": {3}, "b": b"x"}
    assert objects.clone(odd) == copy.deepcopy(odd)
    assert objects.clone(odd)["t"][1] is not odd["t"][1]
    sentinel = object()
    assert objects.copy_decoded({"o": sentinel, "n": [1]})["n"] == [1]  # msgpack cannot carry it: cloned instead


def test_a_merge_is_a_new_object_and_changes_neither_input() -> None:
    original = copy.deepcopy(STACK)
    patch = {"metadata": {"labels": {"c": "d"}}, "spec": {"config": {"k2": "v2"},
                                                          "envs": [{"name": "B", "value": "2"}]}}
    before_original, before_patch = copy.deepcopy(original), copy.deepcopy(patch)
    schema = {"spec": patchmeta.Field(schema={"envs": patchmeta.Field(merge=True, merge_key="name")})}
    merged = smp.merge(original, patch, schema)
    assert original == before_original
    assert patch == before_patch
    assert merged["metadata"]["labels"] == {"a": "b", "c": "d"}
    assert merged["spec"]["envs"][1] == {"name": "B", "value": "2", "nested": {"deep": [1, 2.5, "x"]}}
    # untouched branches too are the merge's own: a caller that edits the result edits nothing else
    assert not set(_containers(merged)) & set(_containers(original))
    merged["spec"]["envs"][0]["value"] = "changed"
    merged["metadata"]["finalizers"].append("g")
    assert original == before_original


def test_an_owner_reference_is_set_on_a_copy() -> None:
    owner = {"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace", "metadata": {"name": "w", "uid": "u-w"}}
    owned = owners.set_controller_reference(STACK, owner)
    assert owners.controller_of(owned) is not None
    assert "ownerReferences" not in STACK["metadata"]  # type: ignore[operator]
    assert not set(_containers(owned)) & set(_containers(STACK))
