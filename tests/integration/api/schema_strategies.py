"""Hypothesis strategies that draw valid objects from a CRD structural schema.

Used to round-trip generated specs through the real API server. Properties that carry a schema default are
always drawn (so the server never adds anything), list maps get unique keys, and free-form JSON is drawn without
nulls (the API server drops nulls from non-nullable fields).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

TEXT = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=12)
KEYS = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-", min_size=1,
               max_size=10)
TIMES = st.sampled_from(["2026-01-01T00:00:00Z", "2025-06-30T12:34:56Z"])
QUANTITIES = st.sampled_from(["1", "100m", "512Mi", "1Gi", 2])
SCALARS = st.one_of(st.booleans(), st.integers(-1000, 1000), st.sampled_from([0.5, 30.5, -1.25]), TEXT)
JSON = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(KEYS, inner, max_size=3)), max_leaves=6)


def from_schema(schema: dict[str, Any], skip: frozenset[str] = frozenset()) -> st.SearchStrategy[Any]:
    """Valid values for `schema`; optional properties named in `skip` are never drawn."""
    if "anyOf" in schema:
        return QUANTITIES if "pattern" in schema else st.one_of(st.integers(1, 65535), KEYS)
    kind = schema.get("type")
    if kind is None and schema.get("x-kubernetes-preserve-unknown-fields"):
        return JSON
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if kind == "string":
        if schema.get("format") == "date-time":
            return TIMES
        return st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7e),
                       min_size=schema.get("minLength", 0), max_size=12)
    if kind == "integer":
        low = schema.get("minimum", -(2**31) if schema.get("format") == "int32" else -(2**40))
        return st.integers(low, 2**31 - 1)
    if kind == "number":
        return st.sampled_from([0.5, 30.5, -1.25])
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        return _array(schema, skip)
    if kind == "object":
        return _object(schema, skip)
    raise ValueError(f"no strategy for {schema!r}")


def _array(schema: dict[str, Any], skip: frozenset[str]) -> st.SearchStrategy[Any]:
    items = from_schema(schema["items"], skip)
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "map":
        keys = schema["x-kubernetes-list-map-keys"]
        return st.lists(items, max_size=3, unique_by=lambda item: tuple(str(item.get(k)) for k in keys))
    if list_type == "set":
        return st.lists(items, max_size=3, unique=True)
    return st.lists(items, max_size=3)


def _object(schema: dict[str, Any], skip: frozenset[str]) -> st.SearchStrategy[Any]:
    properties: dict[str, Any] = schema.get("properties", {})
    if not properties:
        if "additionalProperties" in schema:
            return st.dictionaries(KEYS, from_schema(schema["additionalProperties"], skip), max_size=3)
        return st.dictionaries(KEYS, JSON, max_size=2) if schema.get("x-kubernetes-preserve-unknown-fields") \
            else st.just({})
    required = set(schema.get("required", ()))
    always = {k: from_schema(v, skip) for k, v in properties.items() if k in required or "default" in v}
    maybe = {k: from_schema(v, skip) for k, v in properties.items() if k not in always and k not in skip}
    return st.fixed_dictionaries(always, optional=maybe)
