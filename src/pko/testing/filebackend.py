"""What a Pulumi `file://` backend's directory says, read from outside the CLI: its lock files and the history of
operations it recorded. Chaos and cluster tests judge "locked" and "ran twice" from these, without trusting the
operator's own account (the backend may be a local directory or a workspace pod's volume read on the node)."""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from pathlib import Path
from typing import Any


def locks(backend: Path) -> list[Path]:
    """The stack lock files the backend holds (an `up` in flight, or one that died without cleaning up)."""
    return sorted((backend / ".pulumi" / "locks").rglob("*.json"))


def history(backend: Path) -> list[dict[str, Any]]:
    """Every operation the CLI recorded, oldest first (unreadable entries skipped)."""
    entries = []
    for path in (backend / ".pulumi" / "history").rglob("*.history.json"):
        with contextlib.suppress(OSError, ValueError):
            entries.append(json.loads(path.read_text()))
    return sorted(entries, key=lambda e: e.get("startTime", 0))


def succeeded_ups(backend: Path, key: str = "round") -> Counter[str]:
    """How many `up`s succeeded with each value of the config `key` (any project's `<project>:<key>`)."""
    counts: Counter[str] = Counter()
    for entry in history(backend):
        if entry.get("kind") == "update" and entry.get("result") == "succeeded":
            config = entry.get("config") or {}
            value = next((v for k, v in config.items() if k.endswith(f":{key}")), None)
            counts[str(value.get("value") if isinstance(value, dict) else value)] += 1
    return counts


def destroyed(backend: Path) -> bool:
    """A `destroy` succeeded."""
    return any(e.get("kind") == "destroy" and e.get("result") == "succeeded" for e in history(backend))
