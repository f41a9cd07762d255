"""Typed models → Kubernetes structural OpenAPI schemas (the CRD validation schemas).

Why: the CRDs must validate, default and prune exactly like the Go operator's, and we want one source of truth —
the pydantic models that the controllers use. A model field's Python type gives the schema type; Kubernetes-only
facts (list semantics, formats, patterns, core types, "free-form JSON") ride along as ``Annotated`` markers defined
here. A non-None Python default is also the CRD default, and a required Python field is a required CRD field.

Two renderings exist. ``crd`` mode is the schema of our own types. ``apply`` mode mirrors what controller-gen
emits for Go *apply configurations* (used by Stack ``workspaceTemplate`` / ``updateTemplate``): the same shape with
every constraint of our own types dropped (no required, enum, default, list markers, patterns), while embedded
Kubernetes core types keep their full schema.

Must never: do I/O (core type schemas come from :mod:`pko.api.coretypes`), emit ``$ref`` (CRD schemas must be
structural), or depend on field declaration order (properties are emitted sorted, like controller-gen).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import pydantic
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from pko.api import coretypes

Schema = dict[str, Any]
Mode = Literal["crd", "apply"]

# Keys that express constraints of our own types; `apply` mode removes them (Go apply configurations carry none).
_CONSTRAINT_KEYS = (
    "required", "enum", "default", "pattern", "minLength", "maxLength", "minimum", "maximum", "maxItems",
    "maxProperties",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type", "x-kubernetes-validations",
)


@dataclass(frozen=True)
class Format:
    """OpenAPI ``format`` (``int32``, ``date-time`` ...). Integers default to ``int64``."""

    value: str


@dataclass(frozen=True)
class Pattern:
    value: str


@dataclass(frozen=True)
class MinLength:
    value: int


@dataclass(frozen=True)
class MaxLength:
    value: int


@dataclass(frozen=True)
class Minimum:
    value: int


@dataclass(frozen=True)
class Maximum:
    value: int


@dataclass(frozen=True)
class MaxItems:
    value: int


@dataclass(frozen=True)
class MaxProperties:
    value: int


@dataclass(frozen=True)
class Rule:
    """A CEL validation rule (``x-kubernetes-validations``) with the message the API server answers when it fails;
    several on one node add up, in order."""

    rule: str
    message: str


@dataclass(frozen=True)
class ListType:
    """``x-kubernetes-list-type`` (``atomic``, ``set`` or ``map``) and, for maps, the key fields."""

    value: Literal["atomic", "set", "map"]
    keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class MapType:
    """``x-kubernetes-map-type`` (``atomic`` or ``granular``)."""

    value: Literal["atomic", "granular"]


@dataclass(frozen=True)
class Schemaless:
    """Any JSON value, kept as is: only ``x-kubernetes-preserve-unknown-fields: true``, no type."""


@dataclass(frozen=True)
class OpenObject:
    """A JSON object with any keys and values, kept as is (``type: object`` and preserve-unknown-fields): unlike
    :class:`Schemaless`, CEL rules can test for its presence."""


@dataclass(frozen=True)
class CoreType:
    """The field holds a Kubernetes core type (e.g. ``io.k8s.api.core.v1.PodSpec``); its full schema is inlined
    from the OpenAPI snapshot of the API server we build against. The Python side keeps it as plain JSON."""

    name: str


@dataclass(frozen=True)
class ApplyConfigurationOf:
    """The field holds an apply configuration of one of our kinds (apiVersion, kind, full metadata, spec, status),
    rendered in ``apply`` mode. The Python side keeps it as plain JSON (it is strategic-merge-patched as such)."""

    spec: type[pydantic.BaseModel]
    status: type[pydantic.BaseModel]
    metadata: type[pydantic.BaseModel]


_Marker = Format | Pattern | MinLength | MaxLength | Minimum | Maximum | MaxItems | MaxProperties | Rule | ListType | \
    MapType | Schemaless | OpenObject | CoreType | ApplyConfigurationOf


def model_schema(model: type[pydantic.BaseModel], mode: Mode = "crd") -> Schema:
    """The structural schema of `model` (an object with sorted properties)."""
    properties: Schema = {}
    required: list[str] = []
    for name, field in model.model_fields.items():
        wire = field.alias or name
        properties[wire] = _field_schema(field, mode)
        if field.is_required():
            required.append(wire)
    schema: Schema = {}
    if model.__doc__ and model.__doc__ is not pydantic.BaseModel.__doc__:
        schema["description"] = _describe(model.__doc__)
    schema["properties"] = dict(sorted(properties.items()))
    if required and mode == "crd":
        schema["required"] = sorted(required)
    schema["type"] = "object"
    schema.update(_model_extras(model, mode))
    return schema


def _model_extras(model: type[pydantic.BaseModel], mode: Mode) -> Schema:
    """Markers declared on the model itself (``__schema_markers__``), e.g. an atomic struct."""
    markers: tuple[_Marker, ...] = getattr(model, "__schema_markers__", ())
    return _apply_markers({}, markers, mode)


def _describe(text: str) -> str:
    return " ".join(text.split())


def _field_schema(field: FieldInfo, mode: Mode) -> Schema:
    schema = _type_schema(field.annotation, tuple(m for m in field.metadata if _is_marker(m)), mode)
    if field.description:
        schema = {"description": _describe(field.description), **schema}
    default = field.default
    if mode == "crd" and default is not PydanticUndefined and default is not None:
        schema["default"] = default
    return dict(sorted(schema.items()))


def _is_marker(value: object) -> bool:
    return isinstance(value, _Marker)


def _type_schema(annotation: Any, markers: tuple[_Marker, ...], mode: Mode) -> Schema:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *extra = typing.get_args(annotation)
        return _type_schema(inner, markers + tuple(m for m in extra if _is_marker(m)), mode)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(options) != 1:
            raise TypeError(f"unions other than Optional have no structural schema: {annotation!r}")
        return _type_schema(options[0], markers, mode)
    for marker in markers:
        if isinstance(marker, CoreType):
            return coretypes.schema(marker.name)
        if isinstance(marker, Schemaless):
            return {"x-kubernetes-preserve-unknown-fields": True}
        if isinstance(marker, OpenObject):
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        if isinstance(marker, ApplyConfigurationOf):
            return _apply_configuration(marker)
    return _apply_markers(_plain_schema(annotation, origin, mode), markers, mode)


def _plain_schema(annotation: Any, origin: Any, mode: Mode) -> Schema:
    if annotation is Any:
        return {"x-kubernetes-preserve-unknown-fields": True}
    if annotation is str:
        return {"type": "string"}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"format": "int64", "type": "integer"}
    if annotation is float:
        return {"type": "number"}
    if origin is Literal:
        values = list(typing.get_args(annotation))
        return {"enum": values, "type": "string"} if mode == "crd" else {"type": "string"}
    if origin is list:
        (item,) = typing.get_args(annotation)
        return {"items": _type_schema(item, (), mode), "type": "array"}
    if origin is dict:
        key, value = typing.get_args(annotation)
        if key is not str:
            raise TypeError(f"map keys must be strings: {annotation!r}")
        return {"additionalProperties": _type_schema(value, (), mode), "type": "object"}
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return model_schema(annotation, mode)
    raise TypeError(f"no schema rule for {annotation!r}")


_MARKER_RULES: dict[type, Callable[[Any], Schema]] = {
    Format: lambda m: {"format": m.value},
    Pattern: lambda m: {"pattern": m.value},
    MinLength: lambda m: {"minLength": m.value},
    MaxLength: lambda m: {"maxLength": m.value},
    Minimum: lambda m: {"minimum": m.value},
    Maximum: lambda m: {"maximum": m.value},
    MaxItems: lambda m: {"maxItems": m.value},
    MaxProperties: lambda m: {"maxProperties": m.value},
    MapType: lambda m: {"x-kubernetes-map-type": m.value},
    ListType: lambda m: {"x-kubernetes-list-type": m.value, **({"x-kubernetes-list-map-keys": list(m.keys)}
                                                                  if m.keys else {})},
}


def _apply_markers(schema: Schema, markers: tuple[_Marker, ...], mode: Mode) -> Schema:
    for marker in markers:
        if isinstance(marker, Rule):
            schema["x-kubernetes-validations"] = [*schema.get("x-kubernetes-validations", ()),
                                                  {"message": marker.message, "rule": marker.rule}]
            continue
        rule = _MARKER_RULES.get(type(marker))
        if rule is not None:
            schema.update(rule(marker))
    if mode == "apply":
        for key in _CONSTRAINT_KEYS:
            schema.pop(key, None)
    return dict(sorted(schema.items()))


def _apply_configuration(marker: ApplyConfigurationOf) -> Schema:
    return {
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": model_schema(marker.metadata, "apply"),
            "spec": model_schema(marker.spec, "apply"),
            "status": model_schema(marker.status, "apply"),
        },
        "type": "object",
    }

