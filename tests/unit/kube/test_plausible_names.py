"""A name no object can have (control characters, `/`, `..`) is never put into a request URL: the get is NotFound."""

from __future__ import annotations

import pytest

from pko.kube import client


@pytest.mark.parametrize("name", ["app", "my-stack.v2", "system:controller", "a", "x" * 253, "Upper1"])
def test_names_objects_can_have(name: str) -> None:
    assert client.plausible_name(name)


@pytest.mark.parametrize("name", ["", ".", "..", "../secrets", "a/b", "a\x10b", "a%2Fb", "-a", "a-", "x" * 254,
                                  "caf\u00e9", " a"])
def test_names_no_object_can_have(name: str) -> None:
    assert not client.plausible_name(name)


async def test_get_of_an_impossible_name_is_not_found_without_a_request() -> None:
    kc = client.Client.__new__(client.Client)  # no connection: the refusal must come before any request
    with pytest.raises(client.errors.NotFound, match="not a valid object name"):
        await kc.get("v1/Secret", "a\x10b", "default")
