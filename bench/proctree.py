"""The process tree below a pid, read from ``/proc``: its descendants, its agents, a process's RSS and CPU; and
:func:`write_json`, how the processes that sample them hand their figures over.

Why a module of its own: :mod:`bench.procwatch` samples the tree in a process of its own and must be sampling
within a moment (a fleet of a few Stacks is Ready in seconds), so it imports nothing of pko; :mod:`bench.localfleet`
reads the same figures at the ends of its phases.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path


def _direct_children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def children(pid: int) -> Iterator[int]:
    """Every descendant process of `pid` (the agents and the CLIs they run)."""
    for child in _direct_children(pid):
        yield child
        yield from children(child)


def rss(pid: int, field: str = "VmRSS") -> int:
    """A process's resident memory in bytes (`field` VmHWM: its peak), 0 when it is gone."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu(pid: int) -> float:
    """The CPU seconds a live process has used itself (user + system; not its children's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def agents(pid: int) -> int:
    """The agent processes below `pid` (`pko agent serve`, or the standalone agent), not counting what an agent
    started: a process an agent has just forked carries the agent's command line until it execs the CLI, and was
    counted as a second agent (the likely reading of 21 agents seen at once in a pool of 20)."""
    count = 0
    for child in _direct_children(pid):
        try:
            words = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in words and any(w.endswith(b"agent") for w in words):
            count += 1
        else:
            count += agents(child)
    return count


def write_json(path: Path, values: object) -> None:
    """Replace `path` whole with `values` as JSON: a reader never sees half a file."""
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(values))
    partial.replace(path)
