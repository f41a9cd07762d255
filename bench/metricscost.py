"""What a fleet's per-Stack metrics cost the operator (a script, not a test): ``python -m bench.metricscost``.

Why: pko's Pulumi metrics (docs/metrics.md) have series per Stack — three histograms, four counters and a gauge —
so at fleet size they are tens of thousands of series held in the operator and written at every Prometheus scrape,
on its event loop. This records one Stack's worth of observations (a fetch, an install, a successful ``up``) for
N Stacks twice, once in prometheus_client's own metrics of the same names, labels and buckets (what pko used until
2026-12-04) and once in pko's (:mod:`pko.runtime.compactmetrics`), and prints for each the memory the series hold
(tracemalloc), the CPU of one scrape's rendering, its size and its series.

    python -m bench.metricscost                # 1,000 Stacks
    python -m bench.metricscost --stacks 5000
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from collections.abc import Callable, Sequence

import prometheus_client
from prometheus_client import CollectorRegistry

from pko.runtime import compactmetrics, metrics


def _client_metrics(registry: CollectorRegistry) -> Callable[[str, str], None]:
    """prometheus_client's metrics under pko's Pulumi metric names: records one Stack's update."""
    duration = prometheus_client.Histogram("pulumi_update_duration_seconds", "d",
                                           ["namespace", "stack", "type", "result"], buckets=metrics.UPDATE_BUCKETS,
                                           registry=registry)
    phase = prometheus_client.Histogram("pulumi_update_phase_duration_seconds", "p", ["namespace", "stack", "phase"],
                                        buckets=metrics.UPDATE_BUCKETS, registry=registry)
    changes = prometheus_client.Counter("pulumi_stack_resource_changes_total", "c",
                                        ["namespace", "stack", "type", "op"], registry=registry)
    success = prometheus_client.Gauge("pulumi_stack_last_success_timestamp_seconds", "s",
                                      ["namespace", "stack", "type"], registry=registry)

    def record(namespace: str, stack: str) -> None:
        for name, seconds in (("fetch", 1.5), ("install", 3.0), ("operation", 30.0)):
            phase.labels(namespace, stack, name).observe(seconds)
        duration.labels(namespace, stack, "up", "succeeded").observe(40.0)
        for op in metrics.CHANGE_OPS:
            changes.labels(namespace, stack, "up", op).inc(2 if op == "create" else 0)
        success.labels(namespace, stack, "up").set(1.7e9)
    return record


def _pko_metrics(registry: CollectorRegistry) -> Callable[[str, str], None]:
    pulumi = metrics.pulumi(registry)

    def record(namespace: str, stack: str) -> None:
        pulumi.phase(namespace, stack, "fetch", 1.5)
        pulumi.phase(namespace, stack, "install", 3.0)
        pulumi.update_finished(namespace, stack, "up", True, seconds=40.0, operation_seconds=30.0,
                               changes={"create": 2}, ended_at=1.7e9)
    return record


def measure(make: Callable[[CollectorRegistry], Callable[[str, str], None]],
            render: Callable[[CollectorRegistry], bytes], stacks: int) -> dict[str, float]:
    """The series' memory, one scrape's CPU and size, and the series count for `stacks` Stacks."""
    registry = CollectorRegistry()
    tracemalloc.start()
    try:
        record = make(registry)
        for i in range(stacks):
            record(f"team-{i % 10}", f"stack-{i:05d}")
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    cpu = time.process_time()
    text = render(registry)
    cpu = time.process_time() - cpu
    series = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
    return {"held (MB)": held / 1e6, "scrape CPU (s)": cpu, "scrape (MB)": len(text) / 1e6, "series": series}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metricscost", description=__doc__.splitlines()[0])
    parser.add_argument("--stacks", type=int, default=1000)
    args = parser.parse_args(argv)
    before = measure(_client_metrics, prometheus_client.generate_latest, args.stacks)
    after = measure(_pko_metrics, compactmetrics.exposition, args.stacks)
    print(f"Pulumi metrics of {args.stacks} Stacks:")
    print(f"  {'':22}{'prometheus_client':>18}{'pko':>10}{'pko/it':>9}")
    for key in before:
        ratio = after[key] / before[key] if before[key] else 0.0
        print(f"  {key:22}{before[key]:18.3g}{after[key]:10.3g}{ratio:9.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
