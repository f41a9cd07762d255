"""What a Pulumi `file://` backend's directory says, read from outside the CLI: its lock files and the history of
operations it recorded. Chaos and cluster tests judge "locked" and "ran twice" from these, without trusting the
operator's own account (the backend may be a local directory or a workspace pod's volume read on the node), and
add them up in a :class:`Tally`, whose line ends a soak run."""

from __future__ import annotations

import contextlib
import json
import os
from collections import Counter
from dataclasses import dataclass, field
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


@dataclass
class Tally:
    """What a fault run's backends (and, on the local runtime, /proc) say: the soak's closing line."""

    rounds: int = 0
    updates: int = 0
    lost: int = 0
    duplicated: int = 0
    locked: int = 0
    orphaned: int = 0
    details: list[str] = field(default_factory=list)

    def count(self, name: str, backend: Path) -> None:
        """Add one Stack's finished `up`s, its `up`s repeated for one round and its leftover locks."""
        ups = succeeded_ups(backend)
        self.updates += sum(ups.values())
        for round_, times in ups.items():
            if times > 1:
                self.duplicated += times - 1
                self.details.append(f"{name}: round {round_} succeeded {times} times")
        held = locks(backend)
        if held:
            self.locked += len(held)
            self.details.append(f"{name}: locked by {[p.name for p in held]}")

    def line(self) -> str:
        return (f"soak: rounds={self.rounds} updates={self.updates} lost={self.lost} duplicated={self.duplicated} "
                f"locked={self.locked} orphaned={self.orphaned}")

    def clean(self) -> bool:
        return self.lost == self.duplicated == self.locked == self.orphaned == 0

    def record(self) -> None:
        """Print the line, and append it to ``$PKO_SOAK_TALLY`` when set (`make soak` sums those lines)."""
        print(self.line())
        if os.environ.get("PKO_SOAK_TALLY"):
            with Path(os.environ["PKO_SOAK_TALLY"]).open("a") as out:
                out.write(self.line() + "\n")
