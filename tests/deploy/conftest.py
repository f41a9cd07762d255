"""Fixtures for the deploy tier: the real `helm` (built from Go modules by `make tools`) and the chart's renders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from helmchart import CHART, Render, load_all, run_helm

from pko.testing import binaries


@pytest.fixture(scope="session")
def helm() -> Path:
    try:
        return binaries.require("helm")
    except binaries.MissingBinaryError as err:
        pytest.fail(str(err), pytrace=False)


@pytest.fixture(scope="session")
def render(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Render:
    """`render(values=None, *extra_args, release=..., namespace=...)`: the objects `helm template` renders."""

    def _render(values: dict[str, Any] | None = None, *extra: str, release: str = "pko",
                namespace: str = "pko-system") -> list[dict[str, Any]]:
        args = ["template", release, str(CHART), "--namespace", namespace, *extra]
        if values is not None:
            path = tmp_path_factory.mktemp("values") / "values.yaml"
            path.write_text(yaml.safe_dump(values))
            args += ["--values", str(path)]
        return load_all(run_helm(helm, *args))

    return _render
