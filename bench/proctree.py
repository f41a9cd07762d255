"""The process tree below a pid, read from ``/proc``: its descendants, its agents, a process's RSS and CPU; and
the :class:`StatusFile`, how the processes that sample them hand their figures over.

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
from typing import Any


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


class StatusFile:
    """A small JSON file its writer rewrites in place, many times a second if need be, for another process to read
    (:func:`read_json`).

    Why not a new file renamed over the old one each time: on ext4 a rename over an existing file makes the kernel
    write the new file's data out first (``auto_da_alloc``), 3.5 ms a time on this VM; twice a second in the
    operator's process that was 2% of its samples in a 200-Stack fleet, charged to the operator's CPU figure. The
    text is padded with spaces to the longest written so far, so no old tail is ever left behind it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._size = 0

    def write(self, values: object) -> None:
        data = json.dumps(values).encode()
        self._size = max(self._size, len(data))
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.pwrite(self._fd, data.ljust(self._size), 0)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_json(path: Path) -> Any:
    """What a :class:`StatusFile` at `path` holds (None: nothing yet). A read that met a write half done (it does
    not parse) is read again."""
    for _ in range(READ_TRIES):
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            return None
        if not text.strip():
            return None
        with contextlib.suppress(ValueError):
            return json.loads(text)
    raise RuntimeError(f"{path} did not parse in {READ_TRIES} reads")


#: Reads of a :class:`StatusFile` before giving up: a read meets a write half done only rarely.
READ_TRIES = 20
