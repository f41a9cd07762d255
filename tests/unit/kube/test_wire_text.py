"""Strings the API server's wire formats mishandle (found by tests/chaos/hostile/test_fuzzed_workspaces.py): an
apply body is read as YAML, which refuses C1 controls and folds NEL; a watch stream must split at newlines only."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import msgspec

from pko.kube import client


def test_an_apply_body_without_odd_characters_is_passed_as_is() -> None:
    obj = {"metadata": {"name": "x"}, "data": {"k": "caf\u00e9 \U0001f600 \u00a0 \u2027 \ufffd"}}
    assert client.apply_body(obj) == msgspec.json.encode(obj)


def test_an_apply_body_with_characters_yaml_refuses_is_escaped_json_of_the_same_object() -> None:
    text = "a\x7fb\x80c\x85d\x9fe\u2028f\u2029g\ufffeh\uffff \\u0080 \u00e9"
    obj = {"data": {"k": text}}
    raw = client.apply_body(obj)
    assert all(ch not in raw.decode() for ch in "\x7f\x80\x85\x9f\u2028\u2029\ufffe\uffff")
    assert json.loads(raw) == obj


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


def test_json_lines_split_at_newlines_only() -> None:
    nel = json.dumps({"k": "a\x85b\u2028c"}, ensure_ascii=False).encode()

    async def collect() -> list[bytes]:
        return [line async for line in client.json_lines(_chunks(nel[:3], nel[3:] + b"\n{\"b\"", b":1}\n\n", b"{}"))]

    assert asyncio.run(collect()) == [nel, b'{"b":1}', b"{}"]
