"""Pulumi CLI versions parse as Go's blang/semver ``ParseTolerant`` parses them (the reference's version gate)."""

from __future__ import annotations

import pytest

from pko.api import versions


@pytest.mark.parametrize(("text", "expected"), [
    ("3.259.0", "3.259.0"),
    ("v3.259.0", "3.259.0"),
    (" v3.202.1\n", "3.202.1"),
    ("3.202.0-alpha.1712345678", "3.202.0-alpha.1712345678"),
    ("3.202.0+dirty", "3.202.0+dirty"),
    ("10.0.12", "10.0.12"),
    ("3.202", "3.202.0"),
    ("3", "3.0.0"),
    ("03.01.02", "3.1.2"),
])
def test_parse_tolerant(text: str, expected: str) -> None:
    assert str(versions.parse_tolerant(text)) == expected


@pytest.mark.parametrize("text", [
    "", "latest", "v", "three.two.one", "3.x.0", "-3.1.0", "3.2-rc1", "3.2.0.1", "vv3.1.0", "3.1.0-01",
])
def test_parse_tolerant_refuses_what_go_refuses(text: str) -> None:
    assert versions.parse_tolerant(text) is None


def test_order_is_semver_order() -> None:
    parse = versions.parse_tolerant
    assert parse("3.202.0-alpha") < parse("3.202.0") < parse("3.202.1") < parse("3.1000.0")  # type: ignore[operator]
