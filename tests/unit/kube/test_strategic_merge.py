"""Strategic merge patch: examples mirroring Kubernetes semantics, and properties over generated pod templates."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pko.kube import patchmeta, smp

POD = patchmeta.POD_TEMPLATE_SPEC


def template(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "ws"}}, "spec": spec}


BASE = template(
    initContainers=[{"name": "bootstrap", "image": "agent"}, {"name": "fetch", "image": "agent"}],
    containers=[
        {
            "name": "pulumi",
            "image": "pulumi/pulumi:latest",
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            "ports": [{"name": "grpc", "containerPort": 50051}],
            "volumeMounts": [{"name": "share", "mountPath": "/share"}],
            "command": ["/share/agent", "serve"],
        }
    ],
    volumes=[{"name": "share", "emptyDir": {}}],
    tolerations=[{"key": "a", "operator": "Exists"}],
)


def test_empty_patch_is_identity() -> None:
    assert smp.merge(BASE, {}, POD) == BASE


def test_arguments_are_not_mutated() -> None:
    before = copy.deepcopy(BASE)
    patch = {"spec": {"containers": [{"name": "pulumi", "env": [{"name": "A", "$patch": "delete"}]}]}}
    patch_before = copy.deepcopy(patch)
    smp.merge(BASE, patch, POD)
    assert before == BASE
    assert patch == patch_before


def test_container_merged_by_name_updates_only_that_container() -> None:
    patch = {"spec": {"containers": [{"name": "pulumi", "image": "custom:1", "resources": {"limits": {"cpu": "1"}}}]}}
    merged = smp.merge(BASE, patch, POD)
    pulumi = merged["spec"]["containers"][0]
    assert pulumi["image"] == "custom:1"
    assert pulumi["resources"] == {"limits": {"cpu": "1"}}
    assert pulumi["env"] == BASE["spec"]["containers"][0]["env"]
    assert merged["spec"]["initContainers"] == BASE["spec"]["initContainers"]


def test_new_containers_are_appended_and_original_order_is_kept() -> None:
    patch = {"spec": {"initContainers": [{"name": "extra", "image": "x"}, {"name": "fetch", "image": "mine"}]}}
    merged = smp.merge(BASE, patch, POD)
    assert [c["name"] for c in merged["spec"]["initContainers"]] == ["bootstrap", "fetch", "extra"]
    assert merged["spec"]["initContainers"][1]["image"] == "mine"


def test_env_merged_by_name() -> None:
    env_patch = [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}]
    patch = {"spec": {"containers": [{"name": "pulumi", "env": env_patch}]}}
    env = smp.merge(BASE, patch, POD)["spec"]["containers"][0]["env"]
    assert env == [{"name": "A", "value": "1"}, {"name": "B", "value": "two"}, {"name": "C", "value": "3"}]


def test_env_value_from_replaces_value_only_via_null() -> None:
    patch = {"spec": {"containers": [{"name": "pulumi", "env": [
        {"name": "A", "value": None, "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    ]}]}}
    env = smp.merge(BASE, patch, POD)["spec"]["containers"][0]["env"]
    assert env[0] == {"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}


def test_ports_merged_by_container_port() -> None:
    patch = {"spec": {"containers": [{"name": "pulumi", "ports": [
        {"containerPort": 50051, "protocol": "TCP"}, {"containerPort": 8080, "name": "http"},
    ]}]}}
    ports = smp.merge(BASE, patch, POD)["spec"]["containers"][0]["ports"]
    assert ports == [
        {"name": "grpc", "containerPort": 50051, "protocol": "TCP"},
        {"containerPort": 8080, "name": "http"},
    ]


def test_volume_mounts_merged_by_mount_path_as_in_kubernetes() -> None:
    patch = {"spec": {"containers": [{"name": "pulumi", "volumeMounts": [
        {"name": "other", "mountPath": "/share"}, {"name": "cfg", "mountPath": "/cfg"},
    ]}]}}
    mounts = smp.merge(BASE, patch, POD)["spec"]["containers"][0]["volumeMounts"]
    assert mounts == [{"name": "other", "mountPath": "/share"}, {"name": "cfg", "mountPath": "/cfg"}]


def test_tolerations_and_command_are_replaced_atomically() -> None:
    patch = {"spec": {
        "tolerations": [{"key": "b", "operator": "Exists"}],
        "containers": [{"name": "pulumi", "command": ["sleep"]}],
    }}
    merged = smp.merge(BASE, patch, POD)
    assert merged["spec"]["tolerations"] == [{"key": "b", "operator": "Exists"}]
    assert merged["spec"]["containers"][0]["command"] == ["sleep"]


def test_delete_directive_removes_item_by_merge_key() -> None:
    patch = {"spec": {
        "initContainers": [{"name": "fetch", "$patch": "delete"}],
        "volumes": [{"name": "share", "$patch": "delete"}, {"name": "tmp", "emptyDir": {}}],
    }}
    merged = smp.merge(BASE, patch, POD)
    assert [c["name"] for c in merged["spec"]["initContainers"]] == ["bootstrap"]
    assert merged["spec"]["volumes"] == [{"name": "tmp", "emptyDir": {}}]


def test_replace_directive_in_list_keeps_only_patch_items() -> None:
    patch = {"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "x"}]}}
    merged = smp.merge(BASE, patch, POD)
    assert merged["spec"]["containers"] == [{"name": "only", "image": "x"}]


def test_replace_directive_in_map_replaces_the_map() -> None:
    patch = {"metadata": {"labels": {"$patch": "replace", "team": "x"}}}
    assert smp.merge(BASE, patch, POD)["metadata"]["labels"] == {"team": "x"}


def test_delete_directive_in_map_empties_it_as_go_does() -> None:
    patch = {"metadata": {"labels": {"$patch": "delete"}}}
    assert smp.merge(BASE, patch, POD)["metadata"]["labels"] == {}


def test_null_deletes_key_and_unmatched_null_is_dropped() -> None:
    patch = {"metadata": {"labels": {"app": None, "absent": None}}, "spec": {"nodeSelector": None}}
    merged = smp.merge(BASE, patch, POD)
    assert merged["metadata"]["labels"] == {}
    assert "nodeSelector" not in merged["spec"]


def test_maps_merge_recursively() -> None:
    original = {"spec": {"securityContext": {"runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}}}}
    patch = {"spec": {"securityContext": {"runAsUser": 0, "fsGroup": 2000}}}
    assert smp.merge(original, patch, POD)["spec"]["securityContext"] == {
        "runAsUser": 0, "fsGroup": 2000, "seccompProfile": {"type": "RuntimeDefault"},
    }


def test_new_value_is_cleaned_of_directives_and_nulls() -> None:
    patch = {"spec": {"affinity": {"nodeAffinity": None, "podAffinity": {"x": 1}},
                      "hostAliases": [{"ip": "1.2.3.4", "$patch": "delete"}]}}
    merged = smp.merge({"spec": {}}, patch, POD)
    assert merged["spec"] == {"affinity": {"podAffinity": {"x": 1}}, "hostAliases": []}


def test_finalizers_merge_as_a_set_and_delete_from_primitive_list() -> None:
    original = {"metadata": {"finalizers": ["a", "b"]}}
    assert smp.merge(original, {"metadata": {"finalizers": ["b", "c"]}}, POD)["metadata"]["finalizers"] == [
        "a", "b", "c",
    ]
    patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}
    assert smp.merge(original, patch, POD)["metadata"]["finalizers"] == ["b"]


def test_retain_keys_clears_unlisted_fields() -> None:
    original = {"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}
    patch = {"spec": {"volumes": [{"name": "v", "$retainKeys": ["name", "configMap"], "configMap": {"name": "c"}}]}}
    assert smp.merge(original, patch, POD)["spec"]["volumes"] == [{"name": "v", "configMap": {"name": "c"}}]


def test_set_element_order_is_accepted_and_ignored() -> None:
    patch = {"spec": {"$setElementOrder/initContainers": [{"name": "bootstrap"}, {"name": "fetch"}, {"name": "x"}],
                      "initContainers": [{"name": "x", "image": "x"}]}}
    merged = smp.merge(BASE, patch, POD)
    assert [c["name"] for c in merged["spec"]["initContainers"]] == ["bootstrap", "fetch", "x"]
    assert not any(k.startswith("$") for k in merged["spec"])


def test_type_change_replaces() -> None:
    assert smp.merge({"a": {"b": 1}}, {"a": [1]}) == {"a": [1]}
    assert smp.merge({"a": [1]}, {"a": {"b": 1}}) == {"a": {"b": 1}}


@pytest.mark.parametrize(
    "patch",
    [
        {"spec": {"containers": [{"image": "no-name"}]}},
        {"spec": {"containers": [{"name": "x", "$patch": "merge"}]}},
        {"spec": {"containers": ["not-a-map"]}},
        {"metadata": {"finalizers": [{"a": 1}]}},
        {"metadata": {"$patch": "bogus"}},
    ],
)
def test_malformed_patches_are_rejected(patch: dict[str, Any]) -> None:
    with pytest.raises(smp.PatchError):
        smp.merge(BASE, patch, POD)


def test_workspace_env_merges_but_stacks_are_atomic() -> None:
    workspace = {"spec": {
        "env": [{"name": "PULUMI_BACKEND_URL", "value": "file://"}],
        "stacks": [{"name": "dev", "config": [{"key": "a", "value": "1"}]}],
        "podTemplate": {"spec": {"containers": [{"name": "pulumi"}]}},
    }}
    patch = {"spec": {
        "env": [{"name": "EXTRA", "value": "x"}],
        "stacks": [{"name": "dev", "config": [{"key": "b", "value": "2"}]}],
        "podTemplate": {"spec": {"containers": [{"name": "pulumi", "image": "mine"}]}},
    }}
    merged = smp.merge(workspace, patch, patchmeta.WORKSPACE)
    assert [e["name"] for e in merged["spec"]["env"]] == ["PULUMI_BACKEND_URL", "EXTRA"]
    assert merged["spec"]["stacks"] == [{"name": "dev", "config": [{"key": "b", "value": "2"}]}]
    assert merged["spec"]["podTemplate"]["spec"]["containers"] == [{"name": "pulumi", "image": "mine"}]


# --- properties ------------------------------------------------------------------------------------------------

# The machine running the tests may be busy: judge the properties, not the generation speed.
props = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

def by_name(item: Any) -> str:
    return str(item["name"])


def by_port(item: Any) -> int:
    return int(item["containerPort"])


names = st.sampled_from(["a", "b", "c", "d", "pulumi", "fetch"])
scalars = st.one_of(st.text(max_size=4), st.integers(-3, 3), st.booleans())
env_var = st.fixed_dictionaries({"name": names}, optional={"value": st.text(max_size=3)})
container = st.fixed_dictionaries(
    {"name": names},
    optional={
        "image": st.text(max_size=5),
        "env": st.lists(env_var, max_size=4, unique_by=by_name),
        "ports": st.lists(st.fixed_dictionaries({"containerPort": st.integers(1, 4)}), max_size=3,
                          unique_by=by_port),
        "args": st.lists(st.text(max_size=2), max_size=3),
        "resources": st.fixed_dictionaries({}, optional={"limits": st.dictionaries(names, scalars, max_size=2)}),
    },
)
containers = st.lists(container, max_size=4, unique_by=by_name)
pod_template = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.fixed_dictionaries({}, optional={"labels": st.dictionaries(names, st.text(max_size=3),
                                                                                  max_size=3)}),
        "spec": st.fixed_dictionaries({}, optional={
            "containers": containers,
            "initContainers": containers,
            "tolerations": st.lists(st.fixed_dictionaries({"key": names}), max_size=2),
            "nodeSelector": st.dictionaries(names, st.text(max_size=2), max_size=2),
        }),
    },
)


def _container_patch(draw: st.DrawFn) -> dict[str, Any]:
    item: dict[str, Any] = {"name": draw(names)}
    if draw(st.booleans()):
        item["$patch"] = "delete"
        return item
    if draw(st.booleans()):
        item["image"] = draw(st.one_of(st.none(), st.text(max_size=5)))
    if draw(st.booleans()):
        item["env"] = draw(st.lists(env_var, max_size=3, unique_by=by_name))
    return item


@st.composite
def pod_patches(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if draw(st.booleans()):
        spec["containers"] = [_container_patch(draw) for _ in range(draw(st.integers(0, 3)))]
    if draw(st.booleans()):
        spec["initContainers"] = [_container_patch(draw) for _ in range(draw(st.integers(0, 2)))]
    if draw(st.booleans()):
        spec["tolerations"] = draw(st.lists(st.fixed_dictionaries({"key": names}), max_size=2))
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(st.dictionaries(names, st.one_of(st.none(), st.text(max_size=2)), max_size=2))
    patch: dict[str, Any] = {"spec": spec}
    if draw(st.booleans()):
        patch["metadata"] = {"labels": draw(st.dictionaries(names, st.one_of(st.none(), st.text(max_size=2)),
                                                            max_size=2))}
    return patch


@props
@given(pod_template)
def test_property_empty_patch_is_identity(original: dict[str, Any]) -> None:
    assert smp.merge(original, {}, POD) == original


@props
@given(pod_template, pod_patches())
def test_property_merge_is_idempotent(original: dict[str, Any], patch: dict[str, Any]) -> None:
    once = smp.merge(original, patch, POD)
    assert smp.merge(once, patch, POD) == once


@props
@given(pod_template, pod_patches())
def test_property_original_order_kept_and_new_items_appended(original: dict[str, Any], patch: dict[str, Any]) -> None:
    merged = smp.merge(original, patch, POD)
    for field in ("containers", "initContainers"):
        before = [c["name"] for c in original.get("spec", {}).get(field, [])]
        patch_items = patch["spec"].get(field)
        if patch_items is None:
            continue
        deleted = {c["name"] for c in patch_items if c.get("$patch") == "delete"}
        after = [c["name"] for c in merged["spec"][field]]
        kept = [n for n in before if n in after]
        assert after[: len(kept)] == kept
        assert set(before) - deleted <= set(after)
        assert not (deleted - {c["name"] for c in patch_items if "$patch" not in c}) & set(after)


@props
@given(containers, container)
def test_property_merging_one_container_touches_only_that_container(
    existing: list[dict[str, Any]], item: dict[str, Any]
) -> None:
    original = {"spec": {"containers": existing}}
    merged = smp.merge(original, {"spec": {"containers": [item]}}, POD)["spec"]["containers"]
    others_before = [c for c in existing if c["name"] != item["name"]]
    others_after = [c for c in merged if c["name"] != item["name"]]
    assert others_after == others_before
    (target,) = [c for c in merged if c["name"] == item["name"]]
    for key in ("image", "args"):  # scalars and atomic lists: the patch value wins
        if key in item:
            assert target[key] == item[key]


@props
@given(pod_template, pod_patches())
def test_property_result_holds_no_directives_or_nulls(original: dict[str, Any], patch: dict[str, Any]) -> None:
    def clean(value: Any) -> bool:
        if isinstance(value, dict):
            return all(not k.startswith("$") and v is not None and clean(v) for k, v in value.items())
        if isinstance(value, list):
            return all(clean(v) for v in value)
        return True

    assert clean(smp.merge(original, patch, POD))


def test_delete_and_readd_in_one_patch_replaces_the_item_in_place() -> None:
    patch = {"spec": {"initContainers": [{"name": "bootstrap", "$patch": "delete"},
                                         {"name": "bootstrap", "image": "mine"}]}}
    merged = smp.merge(BASE, patch, POD)
    assert merged["spec"]["initContainers"] == [{"name": "bootstrap", "image": "mine"},
                                                {"name": "fetch", "image": "agent"}]
    assert smp.merge(merged, patch, POD) == merged
