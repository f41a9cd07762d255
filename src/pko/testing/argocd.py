"""Argo CD's own health check for `pulumi.com/Stack`, evaluated the way Argo CD evaluates it, over Stacks as pko
writes them: so a test can say what Argo CD shows for each state pko produces (docs/argocd.md).

The script is upstream's `health.lua` (shared/third_party/argo-cd-health, unchanged). Argo CD runs it with
gopher-lua, a Lua 5.1, in a state that opens only the base, package and table libraries, with the resource as the
global table `obj`, and reads back `{status, message}`. Here it runs on Lua 5.1 too (lupa's `lua51`), with the
other libraries removed, the resource converted to nested Lua tables (lists 1-based, as Argo's JSON decoding does).
`upstream_cases` yields upstream's own `health_test.yaml` cases, so the evaluator is checked against Argo's
expectations before it judges pko's Stacks.

lupa is a test dependency (the `dev` extra): it is imported when a check runs, never when this module loads.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SUBDIR = Path("third_party/argo-cd-health/resource_customizations/pulumi.com/Stack")
#: What Argo CD's sandbox does not open (gopher-lua's SkipOpenLibs + base, package, table only).
CLOSED_LIBRARIES = ("io", "os", "debug", "coroutine", "string", "math")


@dataclass(frozen=True)
class Health:
    status: str
    message: str


def check_dir(repo: Path) -> Path:
    """The upstream check's directory: ``$PKO_SHARED_DIR`` or the shared directory beside the repository."""
    shared = Path(os.environ.get("PKO_SHARED_DIR") or repo.parent / "shared")
    directory = shared / SUBDIR
    if not (directory / "health.lua").is_file():
        raise FileNotFoundError(f"Argo CD's health check is missing: {directory / 'health.lua'} (the shared "
                                "directory belongs beside the repository as ../shared, or set PKO_SHARED_DIR)")
    return directory


class HealthCheck:
    """One Lua 5.1 state per check, as Argo CD makes one per evaluation."""

    def __init__(self, script: str) -> None:
        self.script = script

    @classmethod
    def load(cls, directory: Path) -> HealthCheck:
        return cls((directory / "health.lua").read_text())

    def __call__(self, obj: Mapping[str, Any]) -> Health:
        from lupa import lua51  # type: ignore[import-untyped]

        lua = lua51.LuaRuntime(unpack_returned_tuples=True)
        for name in CLOSED_LIBRARIES:
            lua.execute(f"{name} = nil")
        lua.globals().obj = _to_lua(lua, obj)
        result = lua.execute(self.script)
        return Health(str(result["status"]), str(result["message"] or ""))


def _to_lua(lua: Any, value: Any) -> Any:
    if isinstance(value, Mapping):
        return lua.table_from({str(k): _to_lua(lua, v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return lua.table_from([_to_lua(lua, v) for v in value])
    return value


def upstream_cases(directory: Path) -> Iterator[tuple[str, dict[str, Any], Health]]:
    """Upstream's test cases: (input file name, the Stack, the expected health)."""
    spec = yaml.safe_load((directory / "health_test.yaml").read_text())
    for case in spec["tests"]:
        path = directory / case["inputPath"]
        expected = case["healthStatus"]
        yield path.name, yaml.safe_load(path.read_text()), Health(expected["status"], expected.get("message", ""))
