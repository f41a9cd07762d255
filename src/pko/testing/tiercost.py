"""What each test tier cost in a run: a pytest plugin that ends the terminal summary with a table per tier.

Why: `make test` runs every tier in one pytest session, and its budget (CI stops at 90 minutes) is spent tier by
tier. `--durations` names the slowest single steps; this names where the whole run went, so a tier that grows is
seen in the very run that grew it, and the README's table is copied from a real run, not estimated.

A tier is the first directory under `tests/` (`unit`, `e2e`, `cluster`, ...). A test's cost is the sum of its
setup, call and teardown, so a session fixture (a control plane, a real cluster) is charged to the tier of the
first test that needed it. The wall-clock span of a tier is from the start of its first test to the end of its
last; tiers run one after another, so the spans add up to the run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import pytest


@dataclass
class TierCost:
    """The tests of one tier: how many, how they ended, and the time they took."""

    tests: int = 0
    failed_ids: set[str] = field(default_factory=set)
    busy: float = 0.0  # setup + call + teardown, summed
    first: float = field(default=float("inf"))
    last: float = 0.0

    @property
    def failed(self) -> int:
        """Tests that failed or errored in any phase, each once."""
        return len(self.failed_ids)

    @property
    def span(self) -> float:
        return max(0.0, self.last - self.first) if self.tests else 0.0


def tier_of(nodeid: str) -> str:
    """`tests/e2e/test_x.py::test_y` → `e2e`; anything not under `tests/` is its own top directory."""
    parts = PurePosixPath(nodeid.split("::", 1)[0]).parts
    if len(parts) > 1 and parts[0] == "tests":
        return parts[1] if len(parts) > 2 else "(top)"
    return parts[0] if parts else "(top)"


def format_table(costs: dict[str, TierCost]) -> list[str]:
    """The rows printed at the end of a run, in the order the tiers ran, with a total."""
    rows = [f"{'tier':<12} {'tests':>6} {'failed':>6} {'wall':>9} {'in tests':>9}"]
    for name, cost in sorted(costs.items(), key=lambda kv: kv[1].first):
        rows.append(f"{name:<12} {cost.tests:>6} {cost.failed:>6} {_minutes(cost.span):>9} {_minutes(cost.busy):>9}")
    total_wall = sum(c.span for c in costs.values())
    total_busy = sum(c.busy for c in costs.values())
    total_tests = sum(c.tests for c in costs.values())
    total_failed = sum(c.failed for c in costs.values())
    rows.append(f"{'total':<12} {total_tests:>6} {total_failed:>6} {_minutes(total_wall):>9} {_minutes(total_busy):>9}")
    return rows


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


class TierCostPlugin:
    """Registered by the test suite's conftest; collects as reports arrive, prints in the terminal summary."""

    def __init__(self) -> None:
        self.costs: dict[str, TierCost] = {}
        self._started: dict[str, float] = {}

    def pytest_runtest_logstart(self, nodeid: str, location: object) -> None:
        self._started[nodeid] = time.monotonic()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        cost = self.costs.setdefault(tier_of(report.nodeid), TierCost())
        cost.busy += report.duration
        if report.when == "setup":
            cost.tests += 1
            cost.first = min(cost.first, self._started.get(report.nodeid, time.monotonic()))
        if report.failed:
            cost.failed_ids.add(report.nodeid)
        cost.last = max(cost.last, time.monotonic())

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.costs:
            return
        terminalreporter.write_sep("=", "cost per tier")
        for row in format_table(self.costs):
            terminalreporter.write_line(row)
