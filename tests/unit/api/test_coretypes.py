"""Core type rendering (pko.api.coretypes): the OpenAPI publisher's form → controller-gen's CRD form."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pko.api import coretypes

REF = "#/components/schemas/"
MINI: dict[str, dict[str, Any]] = {
    "t.Outer": {
        "description": "outer",
        "type": "object",
        "required": ["port", "name"],
        "properties": {
            "name": {"type": "string", "default": "", "description": "required zero default: dropped"},
            "port": {"type": "integer", "format": "int32", "default": 0},
            "protocol": {"type": "string", "default": "TCP", "enum": ["TCP", "UDP"]},
            "ref": {"type": "string", "default": "", "description": "optional marker default: kept"},
            "inner": {"allOf": [{"$ref": REF + "t.Inner"}], "default": {}, "description": "d"},
            "inners": {"type": "array", "items": {"allOf": [{"$ref": REF + "t.Inner"}], "default": {}},
                       "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["key"],
                       "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "key"},
            "args": {"type": "array", "items": {"type": "string", "default": ""}, "x-kubernetes-list-type": "atomic"},
            "labels": {"type": "object", "additionalProperties": {"type": "string", "default": ""}},
            "quantity": {"$ref": REF + "io.k8s.apimachinery.pkg.api.resource.Quantity"},
            "port2": {"allOf": [{"$ref": REF + "io.k8s.apimachinery.pkg.util.intstr.IntOrString"}]},
            "meta": {"allOf": [{"$ref": REF + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}], "default": {}},
            "when": {"$ref": REF + "io.k8s.apimachinery.pkg.apis.meta.v1.Time"},
        },
        "x-kubernetes-unions": [{"discriminator": "x"}],
    },
    "t.Inner": {
        "type": "object",
        "required": ["key"],
        "properties": {"key": {"type": "string", "default": ""}, "description": {"type": "string"}},
        "x-kubernetes-map-type": "atomic",
    },
    "t.Loop": {"type": "object", "properties": {"next": {"$ref": REF + "t.Loop"}}},
    # As published; rendered by fixed rules instead.
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"oneOf": [{"type": "string"}, {"type": "number"}]},
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"format": "int-or-string",
                                                         "oneOf": [{"type": "integer"}, {"type": "string"}]},
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object", "properties": {"name": {"type": "string"}}},
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": {"type": "string", "format": "date-time"},
}


def test_convert_rules() -> None:
    out = coretypes.convert(MINI, "t.Outer")
    assert "description" not in json.dumps(out).replace('"description": {"type"', "")
    assert "x-kubernetes-unions" not in out
    props = out["properties"]
    assert props["name"] == {"type": "string"}
    assert props["port"] == {"format": "int32", "type": "integer"}
    assert props["protocol"] == {"default": "TCP", "type": "string"}  # enum dropped, marker default kept
    assert props["ref"] == {"default": "", "type": "string"}
    inner = {"properties": {"description": {"type": "string"}, "key": {"type": "string"}}, "required": ["key"],
             "type": "object", "x-kubernetes-map-type": "atomic"}
    assert props["inner"] == inner
    assert props["inners"] == {"items": inner, "type": "array", "x-kubernetes-list-map-keys": ["key"],
                               "x-kubernetes-list-type": "map"}
    assert props["args"] == {"items": {"type": "string"}, "type": "array", "x-kubernetes-list-type": "atomic"}
    assert props["labels"] == {"additionalProperties": {"type": "string"}, "type": "object"}
    assert props["quantity"] == {"anyOf": [{"type": "integer"}, {"type": "string"}],
                                 "pattern": coretypes.QUANTITY_PATTERN, "x-kubernetes-int-or-string": True}
    assert props["port2"] == {"anyOf": [{"type": "integer"}, {"type": "string"}],
                              "x-kubernetes-int-or-string": True}
    assert props["meta"] == {"properties": {
        "annotations": {"additionalProperties": {"type": "string"}, "type": "object"},
        "finalizers": {"items": {"type": "string"}, "type": "array"},
        "labels": {"additionalProperties": {"type": "string"}, "type": "object"},
        "name": {"type": "string"}, "namespace": {"type": "string"},
    }, "type": "object"}  # controller-gen's generateEmbeddedObjectMeta shape
    assert props["when"] == {"format": "date-time", "type": "string"}
    assert out["required"] == ["name", "port"]  # sorted, like controller-gen


def test_convert_refuses_what_cannot_be_structural() -> None:
    with pytest.raises(coretypes.SnapshotError, match="recursive"):
        coretypes.convert(MINI, "t.Loop")
    with pytest.raises(coretypes.SnapshotError, match="not in the snapshot"):
        coretypes.convert(MINI, "t.Missing")


def test_extract_follows_references_and_drops_descriptions() -> None:
    found = coretypes.extract(MINI, ["t.Outer"])
    assert list(found) == sorted(found)
    assert "t.Inner" in found
    assert "t.Loop" not in found
    assert "description" not in found["t.Outer"]
    # A *property* called "description" survives.
    assert "description" in found["t.Inner"]["properties"]
    with pytest.raises(coretypes.SnapshotError):
        coretypes.extract(MINI, ["t.Nope"])


def _walk(node: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found.extend(_walk(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_walk(value))
    return found


def test_real_podspec_is_structural_and_controller_gen_shaped() -> None:
    pod = coretypes.schema("io.k8s.api.core.v1.PodSpec")
    nodes = _walk(pod)
    keys = {k for n in nodes for k in n}
    assert "$ref" not in keys
    assert "allOf" not in keys
    assert "enum" not in keys
    assert "x-kubernetes-patch-strategy" not in keys
    assert pod["required"] == ["containers"]
    container = pod["properties"]["containers"]["items"]
    assert pod["properties"]["containers"]["x-kubernetes-list-map-keys"] == ["name"]
    assert container["required"] == ["name"]
    ports = container["properties"]["ports"]
    assert ports["x-kubernetes-list-map-keys"] == ["containerPort", "protocol"]
    assert ports["items"]["properties"]["protocol"]["default"] == "TCP"
    assert "default" not in ports["items"]["properties"]["containerPort"]
    limits = container["properties"]["resources"]["properties"]["limits"]
    assert limits["additionalProperties"]["x-kubernetes-int-or-string"] is True
    # Every default left is a `+default` marker value of the Kubernetes types.
    # Every default left is a literal `+default` marker value of the Kubernetes types; `+default=ref(...)` ones
    # (azureDisk cachingMode/kind) are gone, as controller-gen ignores them.
    defaults = sorted({json.dumps(n["default"]) for n in nodes if "default" in n})
    assert defaults == sorted(json.dumps(v) for v in [
        "", "TCP", "ext4", False, "default", "/etc/ceph/keyring", "rbd", "admin", "xfs", "ThinProvisioned"])
    azure_disk = pod["properties"]["volumes"]["items"]["properties"]["azureDisk"]["properties"]
    assert "default" not in azure_disk["cachingMode"]
    assert "default" not in azure_disk["kind"]
    assert azure_disk["fsType"]["default"] == "ext4"


def test_inline_local_object_references_are_atomic() -> None:
    """controller-gen carries LocalObjectReference's atomic marker into the types that embed it inline."""
    pod = coretypes.schema("io.k8s.api.core.v1.PodSpec")["properties"]
    env_from = pod["containers"]["items"]["properties"]["envFrom"]["items"]["properties"]
    volume = pod["volumes"]["items"]["properties"]
    projection = volume["projected"]["properties"]["sources"]["items"]["properties"]
    for node in (env_from["configMapRef"], env_from["secretRef"], volume["configMap"], projection["configMap"],
                 projection["secret"]):
        assert node["x-kubernetes-map-type"] == "atomic"
    assert "x-kubernetes-map-type" not in volume["secret"]  # SecretVolumeSource has secretName, no embedding


def test_schema_returns_a_fresh_copy() -> None:
    first = coretypes.schema("io.k8s.api.core.v1.EnvVar")
    first["properties"].clear()
    assert coretypes.schema("io.k8s.api.core.v1.EnvVar")["properties"]
