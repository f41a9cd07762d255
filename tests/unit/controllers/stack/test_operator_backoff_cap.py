"""The operator-wide backoff cap (`--retry-max-backoff`): it bounds retries of every Stack that sets no cap of
its own, so a fleet hit by one transient fault is not frozen for a day (PKO#1294)."""

from __future__ import annotations

import datetime

from pko.api import stack as stack_api
from pko.controllers.stack import sync

NOW = datetime.datetime(2026, 11, 22, 12, 0, tzinfo=datetime.UTC)


def _stack(failures: int, minutes_ago: float, cap_seconds: int | None = None) -> stack_api.Stack:
    last = {"generation": 1, "state": "failed", "failures": failures, "lastAttemptedCommit": "c",
            "lastResyncTime": (NOW - datetime.timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")}
    spec: dict[str, object] = {"stack": "dev"}
    if cap_seconds is not None:
        spec["retryMaxBackoffDurationSeconds"] = cap_seconds
    return stack_api.Stack.model_validate({"metadata": {"name": "s", "generation": 1}, "spec": spec,
                                           "status": {"lastUpdate": last}})


def test_the_operator_cap_bounds_the_backoff() -> None:
    last = _stack(2, 0).status.last_update  # type: ignore[union-attr]
    spec = stack_api.spec_of(_stack(2, 0))
    assert sync.cooldown(spec, last) == 90.0  # 10s·3²: below either cap
    last9 = _stack(9, 0).status.last_update  # type: ignore[union-attr]
    assert sync.cooldown(spec, last9) == 24 * 3600  # 10s·3⁹ = 196830s: the reference's 24h cap by default
    assert sync.cooldown(spec, last9, default_cap=3600) == 3600


def test_a_stack_cap_wins_over_the_operator_cap() -> None:
    stack = _stack(9, 0, cap_seconds=120)
    assert sync.cooldown(stack_api.spec_of(stack), stack.status.last_update, default_cap=3600) == 120  # type: ignore[union-attr]


def test_is_synced_and_requeue_follow_the_operator_cap() -> None:
    stack = _stack(2, 1)  # failed a minute ago with failures=2 (< 3): it retries once the cooldown has passed
    assert sync.is_synced(stack, "c", NOW, default_cap=30)[0] is False  # capped to 30s, and 60s have passed
    assert sync.is_synced(stack, "c", NOW)[0] is True  # uncapped 90s not yet over
    assert sync.requeue_after(stack, NOW, default_cap=3600) == 30.0  # 90s - 60s
