"""The metrics the Stack cache drives: the reference's `stacks_failing`, and pko's `pulumi_stack_stalled` and the
last success seeded from `status.lastUpdate` (so an operator restart does not lose it), both gone with the Stack."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from pko.controllers.stack import setup
from pko.runtime import store


def _stack(last: dict[str, Any] | None = None, stalled: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": []}
    if last is not None:
        status["lastUpdate"] = last
    if stalled is not None:
        status["conditions"].append({"type": "Stalled", "status": "True", "reason": stalled, "message": "m"})
    return {"apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": {"name": "web", "namespace": "team"},
            "status": status}


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"namespace": "team", "stack": "web", **labels})


def test_a_succeeded_last_update_seeds_the_last_success() -> None:
    registry = CollectorRegistry()
    metrics = setup.StackMetrics(registry)
    metrics.observe(store.Event("ADDED", _stack({"state": "succeeded", "type": "up",
                                                 "lastResyncTime": "2025-03-01T12:00:00Z"})))
    assert _value(registry, "pulumi_stack_last_success_timestamp_seconds", type="up") == 1740830400.0
    # a later failure keeps it; deleting the Stack removes it
    metrics.observe(store.Event("MODIFIED", _stack({"state": "failed", "type": "up",
                                                    "lastResyncTime": "2025-03-01T13:00:00Z"})))
    assert _value(registry, "pulumi_stack_last_success_timestamp_seconds", type="up") == 1740830400.0
    metrics.observe(store.Event("DELETED", _stack()))
    assert _value(registry, "pulumi_stack_last_success_timestamp_seconds", type="up") is None


def test_the_stalled_condition_is_a_series_with_its_reason() -> None:
    registry = CollectorRegistry()
    metrics = setup.StackMetrics(registry)
    metrics.observe(store.Event("ADDED", _stack(stalled="SpecInvalid")))
    assert _value(registry, "pulumi_stack_stalled", reason="SpecInvalid") == 1
    metrics.observe(store.Event("MODIFIED", _stack()))
    assert _value(registry, "pulumi_stack_stalled", reason="SpecInvalid") is None
    metrics.observe(store.Event("MODIFIED", _stack(stalled="UpdateFailed")))
    metrics.observe(store.Event("DELETED", _stack(stalled="UpdateFailed")))
    assert _value(registry, "pulumi_stack_stalled", reason="UpdateFailed") is None
    assert registry.get_sample_value("stacks_active") == 0
