"""Helpers of the deploy tests: where the chart is, and `helm` run with a loud failure."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "pko"

Render = Callable[..., list[dict[str, Any]]]


def run_helm(helm: Path, *args: str) -> str:
    done = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"helm {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def load_all(text: str) -> list[dict[str, Any]]:
    """The YAML documents of `text` (libyaml's loader: the CRDs make renders large)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [doc for doc in yaml.load_all(text, Loader=loader) if doc]
