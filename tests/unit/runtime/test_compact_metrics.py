"""The compact metric families (pko.runtime.compactmetrics): the samples prometheus_client's own metrics give for
the same observations, the bytes ``generate_latest`` writes, and the memory a fleet's series take."""

from __future__ import annotations

import tracemalloc

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.utils import floatToGoString

from pko.runtime import compactmetrics, metrics

BUCKETS = (1.0, 2.5, 10.0, 1200.0)
ODD = ('we"ird', "back\\slash", "new\nline", "ünï")


def _observe(histogram: object, counter: object, gauge: object, compact: bool) -> None:
    values = (0.0, 1.0, 1.0000001, 2.5, 9.99, 10.0, 11.0, 5000.0, 0.3)
    for i, value in enumerate(values):
        labels = ("team", ODD[i % len(ODD)], "up")
        if compact:
            histogram.observe(labels, value)  # type: ignore[attr-defined]
            counter.inc(labels[:2], value)  # type: ignore[attr-defined]
            gauge.set(labels[1:], value)  # type: ignore[attr-defined]
        else:
            histogram.labels(*labels).observe(value)  # type: ignore[attr-defined]
            counter.labels(*labels[:2]).inc(value)  # type: ignore[attr-defined]
            gauge.labels(*labels[1:]).set(value)  # type: ignore[attr-defined]


def _registries() -> tuple[CollectorRegistry, CollectorRegistry]:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    # label names deliberately out of order, one after "le": the text format sorts them
    names = ["zone", "stack", "kind"]
    _observe(compactmetrics.Histogram("h_seconds", 'a "doc"\\ with\nlines', names, buckets=BUCKETS, registry=ours),
             compactmetrics.Counter("c_total", "counted", ["zone", "stack"], registry=ours),
             compactmetrics.Gauge("g", "gauged", ["stack", "kind"], registry=ours), compact=True)
    _observe(prometheus_client.Histogram("h_seconds", 'a "doc"\\ with\nlines', names, buckets=BUCKETS,
                                         registry=theirs),
             prometheus_client.Counter("c_total", "counted", ["zone", "stack"], registry=theirs),
             prometheus_client.Gauge("g", "gauged", ["stack", "kind"], registry=theirs), compact=False)
    return ours, theirs


def _samples(registry: CollectorRegistry) -> list[tuple[str, str, str, list[tuple[str, dict[str, str], float]]]]:
    return [(f.name, f.type, f.documentation, sorted(((s.name, s.labels, s.value) for s in f.samples
                                                      if not s.name.endswith("_created")), key=repr))
            for f in registry.collect()]


def test_the_samples_are_prometheus_clients_for_the_same_observations() -> None:
    ours, theirs = _registries()
    assert _samples(ours) == _samples(theirs)
    created = [s for f in ours.collect() for s in f.samples if s.name.endswith("_created")]
    assert {s.name for s in created} == {"h_seconds_created", "c_created"}
    assert ours.get_sample_value("h_seconds_bucket", {"zone": "team", "stack": ODD[1], "kind": "up",
                                                       "le": "2.5"}) == 1.0  # 1.0000001 lands in le=2.5 only


def test_the_exposition_is_what_generate_latest_writes_and_keeps_the_other_metrics() -> None:
    ours, _ = _registries()
    other = prometheus_client.Gauge("plain", "not compact", registry=ours)
    other.set(3)
    unlabelled = compactmetrics.Gauge("bare", "no labels", [], registry=ours)
    unlabelled.set((), 7.0)
    fast = compactmetrics.exposition(ours)
    assert sorted(fast.splitlines()) == sorted(prometheus_client.generate_latest(ours).splitlines())
    assert b"\nplain 3.0\n" in fast
    assert b"\nbare 7.0\n" in fast
    # each family's own block is byte for byte generate_latest's (families may come in another order)
    for family in ours.collect():
        if isinstance(family, compactmetrics._Rendered):
            alone = prometheus_client.generate_latest(compactmetrics._Families([family])).decode()
            assert family.source.render() == alone


def test_created_series_follow_prometheus_clients_switch() -> None:
    """PROMETHEUS_DISABLE_CREATED_SERIES (or ``disable_created_metrics()``) drops every ``_created`` series, for
    the compact families as for prometheus_client's own; the rest stays byte for byte the same."""
    prometheus_client.disable_created_metrics()
    try:
        ours, theirs = _registries()
        fast = compactmetrics.exposition(ours)
        assert b"_created" not in fast
        assert sorted(fast.splitlines()) == sorted(prometheus_client.generate_latest(theirs).splitlines())
        assert not [s for f in ours.collect() for s in f.samples if s.name.endswith("_created")]
    finally:
        prometheus_client.enable_created_metrics()
    assert b"h_seconds_created{" in compactmetrics.exposition(ours)


@pytest.mark.parametrize("n", [0, 1, 7, 999_999, 1_000_000, 1_234_567, 10**17])
def test_a_count_is_written_as_go_writes_the_float(n: int) -> None:
    assert compactmetrics._count(n) == floatToGoString(float(n))


def test_a_series_can_be_removed_and_bad_input_is_refused() -> None:
    registry = CollectorRegistry()
    gauge = compactmetrics.Gauge("g", "doc", ["a"], registry=registry)
    gauge.set(("x",), 1.0)
    gauge.remove("x")
    gauge.remove("never there")
    assert registry.get_sample_value("g", {"a": "x"}) is None
    with pytest.raises(ValueError, match="takes labels"):
        gauge.set(("x", "y"), 1.0)
    with pytest.raises(ValueError, match="only goes up"):
        compactmetrics.Counter("c", "doc", ["a"], registry=registry).inc(("x",), -1.0)
    with pytest.raises(ValueError, match="increasing order"):
        compactmetrics.Histogram("h", "doc", ["a"], buckets=(2.0, 1.0))
    with pytest.raises(ValueError, match="no label named le"):
        compactmetrics.Histogram("h", "doc", ["le"], buckets=(1.0,))


def _fleet(registry: CollectorRegistry, stacks: int) -> None:
    pm = metrics.pulumi(registry)
    for i in range(stacks):
        name = f"stack-{i:04d}"
        pm.phase("team", name, "fetch", 1.5)
        pm.phase("team", name, "install", 3.0)
        pm.update_finished("team", name, "up", True, seconds=40.0, operation_seconds=30.0,
                           changes={"create": 2}, ended_at=1.7e9 + i)


def test_a_thousand_stacks_series_take_a_few_megabytes() -> None:
    """prometheus_client's own histograms, counters and gauges took 19 MB for these series (docs/performance.md)."""
    registry = CollectorRegistry()
    tracemalloc.start()
    try:
        _fleet(registry, 1000)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 8e6, f"{held / 1e6:.1f} MB for 1,000 Stacks' Pulumi metrics"
    text = compactmetrics.exposition(registry).decode()
    assert text.count("\npulumi_update_phase_duration_seconds_count{") == 3000
    assert 'pulumi_stack_resource_changes_total{namespace="team",op="create",stack="stack-0999",type="up"} 2.0' in text
