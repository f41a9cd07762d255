"""CPU per test: which tests a `make test` run's CPU went to, for the table its streams end with.

Why: the run keeps both cores busy, so its wall time only shrinks when tests do less work, and `--durations` cannot
tell a test that waits from one that burns (a test of four minutes can cost less CPU than one of one). The
whole-run table (`pko.testing.cpuacct`) says which commands, not which tests. `tools/run-tiers.sh` puts each stream
in a cgroup of its own (v1 ``cpuacct`` or v2, root only) and names it in ``PKO_TEST_CPU_CGROUPS``; everything a stream
starts (its control plane, agents, Pulumi CLIs, the real cluster's daemons) inherits it. The cluster stream also
names the pod cgroups its node's kubelet creates, so a workspace pod's CPU counts for the test that ran it.

Each test's share is the growth of those counters over its setup, call and teardown: a session fixture's start
counts for the first test that needs it. A cgroup that is removed and made again (a cluster booted twice) starts
from zero again; its growth is then its new value.

Enabled with ``-p pko.testing.testcpu``; without the variable it does nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ENV = "PKO_TEST_CPU_CGROUPS"
SHOWN = 25


def usage(path: Path) -> int | None:
    """Nanoseconds of CPU the cgroup at `path` has used (v1 ``cpuacct.usage``, v2 ``cpu.stat``'s ``usage_usec``), or
    None if it is not there (yet, or any more)."""
    try:
        return int((path / "cpuacct.usage").read_text())
    except (OSError, ValueError):
        pass
    try:
        stat = dict(line.split() for line in (path / "cpu.stat").read_text().splitlines())
        return int(stat["usage_usec"]) * 1000
    except (OSError, ValueError, KeyError):
        return None


def grown(before: int | None, after: int | None) -> int:
    """What a counter grew by; a cgroup made again meanwhile counts from zero."""
    if after is None:
        return 0
    if before is None or after < before:
        return after
    return after - before


@dataclass
class Meter:
    paths: Sequence[Path]
    spent: dict[str, tuple[float, float]] = field(default_factory=dict)

    def read(self) -> list[int | None]:
        return [usage(p) for p in self.paths]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        before, started = self.read(), time.monotonic()
        yield
        after = self.read()
        cpu = sum(grown(b, a) for b, a in zip(before, after, strict=True)) / 1e9
        self.spent[item.nodeid] = (cpu, time.monotonic() - started)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.spent:
            return
        terminalreporter.section("CPU per test (its stream's cgroups)")
        for line in table(self.spent):
            terminalreporter.write_line(line)


def table(spent: dict[str, tuple[float, float]], shown: int = SHOWN) -> list[str]:
    """The tests that used the most CPU, with their wall time and how many cores they kept busy."""
    total = sum(cpu for cpu, _ in spent.values())
    lines = [f"{'CPU s':>8} {'wall s':>8} {'cores':>5}  test"]
    for nodeid, (cpu, wall) in sorted(spent.items(), key=lambda kv: -kv[1][0])[:shown]:
        lines.append(f"{cpu:8.1f} {wall:8.1f} {cpu / wall if wall else 0:5.2f}  {nodeid}")
    lines.append(f"{total:8.1f} {'':>8} {'':>5}  all {len(spent)} tests of this stream")
    return lines


def pytest_configure(config: pytest.Config) -> None:
    names = [p for p in os.environ.get(ENV, "").split(os.pathsep) if p]
    if names:
        config.pluginmanager.register(Meter([Path(p) for p in names]), "pko-test-cpu")
