"""pko's Pulumi metrics (docs/metrics.md): what one finished update records, and the last-success gauge that a
Stack's status seeds after a restart without moving it back."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from pko.runtime import metrics


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_one_registry_has_one_set() -> None:
    registry = CollectorRegistry()
    assert metrics.pulumi(registry) is metrics.pulumi(registry)
    assert metrics.pulumi(CollectorRegistry()) is not metrics.pulumi(registry)


def test_a_successful_up_records_duration_phase_changes_and_success() -> None:
    registry = CollectorRegistry()
    pm = metrics.pulumi(registry)
    pm.update_finished("team", "web", "up", True, seconds=42.0, operation_seconds=30.0,
                       changes={"create": 3, "update": 1, "same": 9}, ended_at=1700000000.0)
    labels = {"namespace": "team", "stack": "web"}
    assert _value(registry, "pulumi_update_duration_seconds_count", **labels, type="up", result="succeeded") == 1
    assert _value(registry, "pulumi_update_duration_seconds_sum", **labels, type="up", result="succeeded") == 42.0
    assert _value(registry, "pulumi_update_phase_duration_seconds_sum", **labels, phase="operation") == 30.0
    changes = {op: _value(registry, "pulumi_stack_resource_changes_total", **labels, type="up", op=op)
               for op in ("create", "update", "delete", "replace", "same")}
    assert changes == {"create": 3, "update": 1, "delete": 0, "replace": 0, "same": None}
    assert _value(registry, "pulumi_stack_last_success_timestamp_seconds", **labels, type="up") == 1700000000.0


def test_a_failure_counts_its_changes_but_is_no_success() -> None:
    registry = CollectorRegistry()
    metrics.pulumi(registry).update_finished("team", "web", "up", False, seconds=5.0, operation_seconds=4.0,
                                             changes={"create": 1}, ended_at=1700000000.0)
    labels = {"namespace": "team", "stack": "web", "type": "up"}
    assert _value(registry, "pulumi_update_duration_seconds_count", **labels, result="failed") == 1
    assert _value(registry, "pulumi_stack_resource_changes_total", **labels, op="create") == 1
    assert _value(registry, "pulumi_stack_last_success_timestamp_seconds", **labels) is None


def test_a_preview_changes_nothing() -> None:
    registry = CollectorRegistry()
    metrics.pulumi(registry).update_finished("team", "web", "preview", True, seconds=5.0, operation_seconds=4.0,
                                             changes={"create": 2}, ended_at=1700000000.0)
    assert _value(registry, "pulumi_stack_resource_changes_total", namespace="team", stack="web", type="preview",
                  op="create") is None
    assert _value(registry, "pulumi_stack_last_success_timestamp_seconds", namespace="team", stack="web",
                  type="preview") == 1700000000.0


def test_the_last_success_only_moves_forward_and_goes_with_its_stack() -> None:
    registry = CollectorRegistry()
    pm = metrics.pulumi(registry)
    pm.succeeded_at("team", "web", "up", 200.0)
    pm.succeeded_at("team", "web", "up", 100.0)  # a Stack status seen after a newer Update
    labels = {"namespace": "team", "stack": "web", "type": "up"}
    assert _value(registry, "pulumi_stack_last_success_timestamp_seconds", **labels) == 200.0
    pm.succeeded_at("team", "other", "up", 50.0)
    pm.succeeded_at("team", "web", "refresh", 150.0)
    pm.forget_stack("team", "web")
    assert _value(registry, "pulumi_stack_last_success_timestamp_seconds", **labels) is None
    assert _value(registry, "pulumi_stack_last_success_timestamp_seconds", **{**labels, "type": "refresh"}) is None
    assert _value(registry, "pulumi_stack_last_success_timestamp_seconds", namespace="team", stack="other",
                  type="up") == 50.0
    pm.succeeded_at("team", "web", "up", 10.0)  # a new Stack of the same name starts afresh
    assert _value(registry, "pulumi_stack_last_success_timestamp_seconds", **labels) == 10.0


def test_a_stalled_stack_has_one_series_with_its_reason() -> None:
    registry = CollectorRegistry()
    pm = metrics.pulumi(registry)
    pm.stack_stalled("team", "web", "UpdateFailed")
    assert _value(registry, "pulumi_stack_stalled", namespace="team", stack="web", reason="UpdateFailed") == 1
    pm.stack_stalled("team", "web", "SpecInvalid")
    assert _value(registry, "pulumi_stack_stalled", namespace="team", stack="web", reason="UpdateFailed") is None
    assert _value(registry, "pulumi_stack_stalled", namespace="team", stack="web", reason="SpecInvalid") == 1
    pm.stack_stalled("team", "web", None)
    assert _value(registry, "pulumi_stack_stalled", namespace="team", stack="web", reason="SpecInvalid") is None
    pm.stack_stalled("team", "web", "UpdateFailed")
    pm.forget_stack("team", "web")
    assert not [s for f in registry.collect() if f.name == "pulumi_stack_stalled" for s in f.samples]
