"""The per-tier cost table `make test` ends with: tiers named from node ids, time charged per phase, failures once."""

from __future__ import annotations

import pytest

from pko.testing import tiercost


@pytest.mark.parametrize(("nodeid", "tier"), [
    ("tests/e2e/test_stack_git.py::test_branch", "e2e"),
    ("tests/integration/agent/test_up.py::test_x[a]", "integration"),
    ("tests/conftest.py", "(top)"),
    ("bench/test_x.py::test_y", "bench"),
])
def test_a_tier_is_the_first_directory_under_tests(nodeid: str, tier: str) -> None:
    assert tiercost.tier_of(nodeid) == tier


def _report(nodeid: str, when: str, duration: float, outcome: str = "passed") -> pytest.TestReport:
    return pytest.TestReport(nodeid, ("x", 0, "x"), {}, outcome, None, when, duration=duration)  # type: ignore[arg-type]


def test_each_phase_is_charged_to_its_tier_and_a_failure_counted_once() -> None:
    plugin = tiercost.TierCostPlugin()
    for nodeid, durations, failing in [
        ("tests/unit/test_a.py::test_one", (0.1, 0.2, 0.0), None),
        ("tests/e2e/test_b.py::test_two", (30.0, 5.0, 2.0), "call"),
        ("tests/e2e/test_b.py::test_three", (0.0, 1.0, 0.5), "teardown"),
    ]:
        plugin.pytest_runtest_logstart(nodeid, ("x", 0, "x"))
        for when, seconds in zip(("setup", "call", "teardown"), durations, strict=True):
            plugin.pytest_runtest_logreport(_report(nodeid, when, seconds, "failed" if when == failing else "passed"))
    unit, e2e = plugin.costs["unit"], plugin.costs["e2e"]
    assert (unit.tests, unit.failed, round(unit.busy, 3)) == (1, 0, 0.3)
    assert (e2e.tests, e2e.failed, round(e2e.busy, 3)) == (2, 2, 38.5)
    assert unit.first <= e2e.first <= e2e.last


def test_the_table_lists_tiers_in_run_order_with_a_total() -> None:
    costs = {
        "e2e": tiercost.TierCost(tests=3, failed_ids={"x"}, busy=125.0, first=10.0, last=140.0),
        "chaos": tiercost.TierCost(tests=2, busy=61.0, first=0.0, last=9.0),
    }
    rows = tiercost.format_table(costs)
    assert [row.split()[0] for row in rows] == ["tier", "chaos", "e2e", "total"]
    assert rows[2].split() == ["e2e", "3", "1", "2m10s", "2m05s"]
    assert rows[3].split() == ["total", "5", "1", "2m19s", "3m06s"]
