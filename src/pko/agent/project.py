"""The workspace's Pulumi project file, and what the agent reads from it.

Why: three decisions of the agent depend on the project: whether to install at all (a prebuilt binary needs
nothing), whether a YAML program's plugins are already there, and what ``GetProjectInfo`` answers (its name and
runtime). ``runtime`` is either a string or a
mapping with ``name`` and ``options``; one reading here keeps them agreeing on which.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

PROJECT_FILES = ("Pulumi.yaml", "Pulumi.yml", "Pulumi.json")


class ProjectError(Exception):
    """The workspace has no readable Pulumi project file."""


def read_project(workdir: Path) -> dict[str, Any]:
    """The parsed project file of the workspace."""
    for name in PROJECT_FILES:
        path = workdir / name
        if path.is_file():
            text = path.read_text()
            data = json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
            if not isinstance(data, dict):
                raise ProjectError(f"{path} does not hold a project")
            return data
    raise ProjectError(f"unable to find project settings in workspace {workdir}")


def runtime_name(project: Mapping[str, Any]) -> str:
    """The project's runtime (``yaml``, ``nodejs``, …): ``runtime`` itself or its ``name``; "" when unset."""
    runtime = project.get("runtime")
    name = runtime.get("name") if isinstance(runtime, Mapping) else runtime
    return str(name or "")


def prebuilt_binary(project: Mapping[str, Any]) -> str | None:
    """The project's ``runtime.options.binary`` (a program built ahead of time: nothing to install), or None."""
    runtime = project.get("runtime")
    options = runtime.get("options") if isinstance(runtime, Mapping) else None
    binary = options.get("binary") if isinstance(options, Mapping) else None
    return str(binary) if binary else None
