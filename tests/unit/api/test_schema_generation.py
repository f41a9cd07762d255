"""Model → structural schema rules (pko.api.schema), on small purpose-built models."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pydantic
import pytest

from pko.api import schema
from pko.api.meta import Condition, Int32, Wire
from pko.api.schema import ApplyConfigurationOf, CoreType, ListType, MapType, MinLength, Pattern, Schemaless


class Item(Wire):
    """An item."""

    __schema_markers__ = (MapType("atomic"),)

    key: str
    value: Any = None


class Sample(Wire):
    """A sample."""

    name: str = pydantic.Field(description="The   name,\n  spread over lines.")
    mode: Literal["a", "b"] = "a"
    count: int | None = None
    small: Int32 | None = None
    flag: bool | None = None
    ratio: float | None = None
    token: Annotated[str, MinLength(1), Pattern("^[a-z]+$")] | None = None
    tags: Annotated[list[str], ListType("set")] | None = None
    items: Annotated[list[Item], ListType("map", ("key",))] | None = None
    labels: dict[str, str] | None = None
    blob: Annotated[dict[str, Any], Schemaless()] | None = None
    anything: dict[str, Any] | None = None
    app_id: str | None = pydantic.Field(None, alias="appID")
    secret: Annotated[dict[str, Any], CoreType("io.k8s.api.core.v1.SecretKeySelector")] | None = None


def test_crd_mode() -> None:
    s = schema.model_schema(Sample)
    assert s["description"] == "A sample."
    assert s["type"] == "object"
    assert s["required"] == ["name"]
    props = s["properties"]
    assert list(props) == sorted(props)
    assert props["name"] == {"description": "The name, spread over lines.", "type": "string"}
    assert props["mode"] == {"default": "a", "enum": ["a", "b"], "type": "string"}
    assert props["count"] == {"format": "int64", "type": "integer"}
    assert props["small"] == {"format": "int32", "type": "integer"}
    assert props["flag"] == {"type": "boolean"}
    assert props["ratio"] == {"type": "number"}
    assert props["token"] == {"minLength": 1, "pattern": "^[a-z]+$", "type": "string"}
    assert props["tags"] == {"items": {"type": "string"}, "type": "array", "x-kubernetes-list-type": "set"}
    assert props["items"]["x-kubernetes-list-type"] == "map"
    assert props["items"]["x-kubernetes-list-map-keys"] == ["key"]
    assert props["items"]["items"] == {
        "description": "An item.",
        "properties": {"key": {"type": "string"}, "value": {"x-kubernetes-preserve-unknown-fields": True}},
        "required": ["key"], "type": "object", "x-kubernetes-map-type": "atomic",
    }
    assert props["labels"] == {"additionalProperties": {"type": "string"}, "type": "object"}
    assert props["blob"] == {"x-kubernetes-preserve-unknown-fields": True}
    assert props["anything"] == {"additionalProperties": {"x-kubernetes-preserve-unknown-fields": True},
                                 "type": "object"}
    assert "appID" in props
    assert "app_id" not in props
    assert props["secret"]["x-kubernetes-map-type"] == "atomic"
    assert props["secret"]["properties"]["name"]["default"] == ""


def test_apply_mode_drops_our_constraints_but_keeps_core_types() -> None:
    s = schema.model_schema(Sample, "apply")
    props = s["properties"]
    assert "required" not in s
    assert props["mode"] == {"type": "string"}
    assert props["token"] == {"type": "string"}
    assert props["tags"] == {"items": {"type": "string"}, "type": "array"}
    assert props["items"]["items"]["properties"]["key"] == {"type": "string"}
    assert "required" not in props["items"]["items"]
    assert "x-kubernetes-map-type" not in props["items"]["items"]
    assert props["secret"] == schema.model_schema(Sample)["properties"]["secret"]


def test_apply_configuration_of() -> None:
    class Holder(Wire):
        template: Annotated[dict[str, Any], ApplyConfigurationOf(spec=Sample, status=Sample, metadata=Item)] | \
            None = None

    template = schema.model_schema(Holder)["properties"]["template"]
    assert sorted(template["properties"]) == ["apiVersion", "kind", "metadata", "spec", "status"]
    assert template["properties"]["spec"] == schema.model_schema(Sample, "apply")


def test_condition_carries_metav1_validation() -> None:
    c = schema.model_schema(Condition)
    assert c["required"] == ["lastTransitionTime", "message", "reason", "status", "type"]
    assert c["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert c["properties"]["reason"]["maxLength"] == 1024
    assert c["properties"]["message"]["maxLength"] == 32768
    assert c["properties"]["type"]["maxLength"] == 316
    assert c["properties"]["observedGeneration"]["minimum"] == 0
    assert c["properties"]["lastTransitionTime"]["format"] == "date-time"


def test_unsupported_types_fail_loudly() -> None:
    class Bad(Wire):
        either: int | str | None = None

    with pytest.raises(TypeError, match="unions"):
        schema.model_schema(Bad)

    class BadKey(Wire):
        mapping: dict[int, str] | None = None

    with pytest.raises(TypeError, match="keys"):
        schema.model_schema(BadKey)
