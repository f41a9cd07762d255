"""Kubernetes core/v1 types (PodSpec, EnvVar, ...) as CRD structural schemas, from the API server's own OpenAPI.

Why: a Workspace's ``podTemplate.spec`` (and ``env``, ``envFrom``, ``resources``, git auth secret selectors) must
carry the *full* core/v1 schema, otherwise the API server prunes fields users set. Writing those schemas by hand
would drift from Kubernetes; instead a snapshot of ``/openapi/v3/api/v1`` of the API server we build against is
committed next to this module (``core_v1_openapi.json``, refreshed by
``tests/integration/api/openapi_snapshot.py``; a test fails when it differs from what the server serves).

This module turns snapshot entries into the form controller-gen gives the same Go types in a CRD:
``$ref`` inlined (CRDs must be structural), descriptions, enums and patch directives dropped, Quantity and
IntOrString as ``x-kubernetes-int-or-string``, embedded ObjectMeta as controller-gen's
``generateEmbeddedObjectMeta`` shape (name, namespace, labels, annotations, finalizers), ``required`` sorted, the
``x-kubernetes-map-type: atomic`` that controller-gen inherits from an inline-embedded ``LocalObjectReference``,
and only the defaults that controller-gen understands: literal ``+default=`` markers (not ``+default=ref(...)``,
not the zero-value defaults the OpenAPI publisher adds for required fields or non-pointer structs). The CRD
parity test (``tests/unit/api/test_crd_parity.py``) holds the result to the Go operator's CRDs.

Must never: fetch anything (the snapshot is read-only package data, loaded once), or mutate the cached snapshot.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import json
from collections.abc import Iterable, Mapping
from typing import Any

Schema = dict[str, Any]

SNAPSHOT_FILE = "core_v1_openapi.json"
REF_PREFIX = "#/components/schemas/"

# The core types our CRDs embed; the snapshot holds these and everything they reference.
ROOTS = (
    "io.k8s.api.core.v1.PodSpec",
    "io.k8s.api.core.v1.ResourceRequirements",
    "io.k8s.api.core.v1.EnvVar",
    "io.k8s.api.core.v1.EnvFromSource",
    "io.k8s.api.core.v1.SecretKeySelector",
)

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

# Types that have a fixed CRD rendering instead of their published schema.
_SPECIAL: dict[str, Schema] = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    },
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    },
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": {"format": "date-time", "type": "string"},
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": {"format": "date-time", "type": "string"},
    # An embedded (non-root) ObjectMeta, as controller-gen renders it with `crd:generateEmbeddedObjectMeta=true`
    # (the Go operator's setting): only the fields an embedded template may set.
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {
        "properties": {
            "annotations": {"additionalProperties": {"type": "string"}, "type": "object"},
            "finalizers": {"items": {"type": "string"}, "type": "array"},
            "labels": {"additionalProperties": {"type": "string"}, "type": "object"},
            "name": {"type": "string"},
            "namespace": {"type": "string"},
        },
        "type": "object",
    },
}

# Types that embed LocalObjectReference inline (`json:",inline"`). controller-gen flattens the embedded struct into
# them together with its `+structType=atomic` marker; the OpenAPI publisher does not, so the snapshot lacks it.
_INLINE_ATOMIC = frozenset({
    "io.k8s.api.core.v1.ConfigMapEnvSource",
    "io.k8s.api.core.v1.SecretEnvSource",
    "io.k8s.api.core.v1.ConfigMapVolumeSource",
    "io.k8s.api.core.v1.ConfigMapProjection",
    "io.k8s.api.core.v1.SecretProjection",
})

# Defaults given by `+default=ref(GoConstant)` markers: the OpenAPI publisher resolves them, controller-gen ignores
# them, so the CRD has no default there.
_REF_DEFAULTS = frozenset({
    ("io.k8s.api.core.v1.AzureDiskVolumeSource", "cachingMode"),
    ("io.k8s.api.core.v1.AzureDiskVolumeSource", "kind"),
})

# Published keys that a CRD schema keeps; everything else (description, enum, patch directives ...) is dropped.
_KEPT = frozenset({
    "type", "format", "items", "properties", "additionalProperties", "required", "default", "anyOf",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern",
    "minItems", "maxItems", "uniqueItems", "minProperties", "maxProperties", "nullable",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
    "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource",
})

_ZERO_VALUES: tuple[object, ...] = ("", 0, False)


class SnapshotError(RuntimeError):
    """The snapshot is missing a type, or a type cannot be rendered structurally."""


def extract(components: Mapping[str, Schema], roots: Iterable[str] = ROOTS) -> dict[str, Schema]:
    """The schemas of `roots` and every type they reference, descriptions removed, sorted by name.

    `components` is ``components.schemas`` of an OpenAPI v3 document. This is what the snapshot stores.
    """
    found: dict[str, Schema] = {}
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name in found:
            continue
        if name not in components:
            raise SnapshotError(f"type {name} is not in the OpenAPI document")
        found[name] = _without_descriptions(components[name])
        pending.extend(_refs(found[name]))
    return dict(sorted(found.items()))


def _without_descriptions(value: Any) -> Any:
    if isinstance(value, dict):
        out: Schema = {}
        for key, item in value.items():
            if key == "description" and isinstance(item, str):
                continue
            # A property may be *named* "description": only drop string-valued description keywords.
            out[key] = _without_descriptions(item)
        return out
    if isinstance(value, list):
        return [_without_descriptions(v) for v in value]
    return value


def _refs(value: Any) -> Iterable[str]:
    if isinstance(value, dict):
        ref = value.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF_PREFIX):
            yield ref[len(REF_PREFIX):]
        for item in value.values():
            yield from _refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _refs(item)


@functools.cache
def snapshot() -> Mapping[str, Any]:
    """The committed snapshot document: ``{"kubernetesVersion": ..., "schemas": {name: schema}}``."""
    text = importlib.resources.files(__package__).joinpath(SNAPSHOT_FILE).read_text(encoding="utf-8")
    document: Mapping[str, Any] = json.loads(text)
    return document


def schema(name: str) -> Schema:
    """The CRD structural schema of core type `name`, from the committed snapshot (a fresh copy)."""
    return copy.deepcopy(_converted(name))


@functools.cache
def _converted(name: str) -> Schema:
    return convert(snapshot()["schemas"], name)


def convert(schemas: Mapping[str, Schema], name: str) -> Schema:
    """Render snapshot type `name` as a CRD structural schema (pure; `schemas` as stored in the snapshot)."""
    return _convert_named(schemas, name, ())


def _convert_named(schemas: Mapping[str, Schema], name: str, stack: tuple[str, ...]) -> Schema:
    if name in _SPECIAL:
        return copy.deepcopy(_SPECIAL[name])
    if name in stack:
        raise SnapshotError(f"recursive type cannot be inlined: {' -> '.join((*stack, name))}")
    if name not in schemas:
        raise SnapshotError(f"type {name} is not in the snapshot")
    converted = _convert(schemas, schemas[name], (*stack, name))
    if name in _INLINE_ATOMIC:
        converted = dict(sorted({**converted, "x-kubernetes-map-type": "atomic"}.items()))
    for owner, prop in _REF_DEFAULTS:
        if owner == name:
            converted["properties"][prop].pop("default", None)
    return converted


def _convert(schemas: Mapping[str, Schema], node: Schema, stack: tuple[str, ...]) -> Schema:
    node = _resolve(schemas, node, stack)
    out: Schema = {}
    required = set(node.get("required", ()))
    for key, value in node.items():
        if key not in _KEPT:
            continue
        if key == "properties":
            out[key] = {
                prop: _property(schemas, sub, stack, prop in required) for prop, sub in sorted(value.items())
            }
        elif key == "required":
            out[key] = sorted(value)
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _without_zero_default(_convert(schemas, value, stack))
        elif key == "default" and value == {}:
            continue
        else:
            out[key] = copy.deepcopy(value)
    return dict(sorted(out.items()))


def _property(schemas: Mapping[str, Schema], node: Schema, stack: tuple[str, ...], required: bool) -> Schema:
    converted = _convert(schemas, node, stack)
    # A required field's zero-value default is an artefact of the OpenAPI publisher, not a `+default` marker.
    return _without_zero_default(converted) if required else converted


def _without_zero_default(node: Schema) -> Schema:
    """List items and map values (and required fields) get zero-value defaults from the OpenAPI publisher only."""
    if "default" in node and any(node["default"] == z and type(node["default"]) is type(z) for z in _ZERO_VALUES):
        del node["default"]
    return node


def _resolve(schemas: Mapping[str, Schema], node: Schema, stack: tuple[str, ...]) -> Schema:
    """Replace ``$ref`` / ``allOf: [{$ref}]`` by the referenced type, keeping the node's own keys on top."""
    ref: str | None = node.get("$ref")
    rest = {k: v for k, v in node.items() if k not in ("$ref", "allOf")}
    all_of = node.get("allOf")
    if all_of is not None:
        if len(all_of) != 1 or "$ref" not in all_of[0]:
            raise SnapshotError(f"unsupported allOf in {'/'.join(stack)}: {all_of!r}")
        ref = all_of[0]["$ref"]
    if ref is None:
        return node
    if not ref.startswith(REF_PREFIX):
        raise SnapshotError(f"unsupported $ref {ref!r}")
    target = _convert_named(schemas, ref[len(REF_PREFIX):], stack)
    return {**target, **rest}
