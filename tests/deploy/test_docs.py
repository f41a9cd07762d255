"""The docs stay true to the code: every `pko operator` flag and every chart value is documented, and every relative
link in docs/, examples/ and the README points at a file that exists."""

from __future__ import annotations

import re
from typing import Any

import yaml
from helmchart import CHART, ROOT

from pko.cli import operator

DOCS = ROOT / "docs"


def test_every_operator_flag_is_documented() -> None:
    text = (DOCS / "operator.md").read_text()
    flags = [opt for action in operator.build_parser()._actions for opt in action.option_strings
             if opt.startswith("--") and opt != "--help"]
    assert flags
    missing = [flag for flag in flags if f"`{flag}`" not in text]
    assert not missing, f"docs/operator.md does not describe {missing}"


def _leaves(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict) and node:
        return [leaf for key, value in node.items() for leaf in _leaves(value, f"{prefix}{key}.")]
    return [prefix.rstrip(".")]


def test_every_chart_value_is_documented() -> None:
    text = (DOCS / "install.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = []
    for leaf in _leaves(values):
        top, _, rest = leaf.partition(".")
        # Documented as `top.rest`, `top.*`, `top.{a, b}` or, for maps given whole (resources…), as `top`.
        if not (f"`{leaf}`" in text or f"`{top}.*`" in text or f"`{top}`" in text
                or re.search(rf"`{re.escape(top)}\.\{{[^}}]*\b{re.escape(rest.split('.')[0])}\b", text)):
            missing.append(leaf)
    assert not missing, f"docs/install.md does not mention {missing}"


def test_relative_links_resolve() -> None:
    broken = []
    for page in [ROOT / "README.md", *DOCS.glob("*.md"), *(ROOT / "examples").rglob("*.md")]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} → {target}")
    assert not broken, broken


def test_compatibility_page_names_real_tests() -> None:
    """Every entry of docs/compatibility.md names a test (`tests/....py::test_name`) that exists."""
    text = (DOCS / "compatibility.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| What")]
    assert rows
    unbacked = [row for row in rows if "::test_" not in row]
    assert not unbacked, f"entries without a test: {unbacked}"
    missing = []
    for path, name in re.findall(r"`(tests/[\w/]+\.py)::(test_\w+)`", text):
        source = ROOT / path
        if not source.is_file() or not re.search(rf"^(async )?def {name}\(", source.read_text(), re.MULTILINE):
            missing.append(f"{path}::{name}")
    assert not missing, f"docs/compatibility.md names tests that do not exist: {missing}"
