"""The order the benchmark harness runs an operator's scenarios in: one at a time for figures that are compared,
all at once for the smoke test, but never the scenario that replaces the operator's pod beside another."""

from __future__ import annotations

from bench.harness import _batches
from bench.scenarios import SCENARIOS


def test_one_at_a_time_keeps_the_order_asked_for() -> None:
    assert _batches(["idle", "restart", "fleet"], together=False) == [["idle"], ["restart"], ["fleet"]]


def test_together_runs_the_calm_scenarios_at_once_and_each_disturber_alone_after_them() -> None:
    assert SCENARIOS["restart"].disturbs_operator
    assert SCENARIOS["killed"].disturbs_operator
    assert _batches(list(SCENARIOS), together=True) == [
        [name for name in SCENARIOS if name not in ("restart", "killed")], ["restart"], ["killed"]]


def test_together_with_only_a_disturber_or_none_makes_no_empty_batch() -> None:
    assert _batches(["restart"], together=True) == [["restart"]]
    assert _batches(["fleet", "latency"], together=True) == [["fleet", "latency"]]
