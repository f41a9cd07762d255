"""Prometheus metrics of the runtime, under controller-runtime's names so existing dashboards carry over.

``controller_runtime_reconcile_total{controller,result}``, ``controller_runtime_reconcile_errors_total``,
``controller_runtime_reconcile_time_seconds``, ``controller_runtime_max_concurrent_reconciles``,
``controller_runtime_active_workers``, ``workqueue_depth``/``adds_total``/``retries_total``/
``queue_duration_seconds``/``work_duration_seconds``/``unfinished_work_seconds``/
``longest_running_processor_seconds`` (labels ``controller`` and ``name``, both the controller
name, as controller-runtime ≥ 0.19 writes them) and ``leader_election_master_status{name}``.

pko's own Pulumi metrics (:class:`PulumiMetrics`, docs/metrics.md) are defined here too, so every metric name the
operator exports is in this module (the Go operator's ``stacks_*``/``programs_active`` gauges excepted: they stay
with the controllers that set them): ``pulumi_update_duration_seconds``, ``pulumi_update_phase_duration_seconds``,
``pulumi_stack_resource_changes_total``, ``pulumi_stack_last_success_timestamp_seconds`` and
``pulumi_stack_stalled``.

Metrics live in a registry passed in (the process-wide ``prometheus_client.REGISTRY`` for the operator, a fresh
one per manager in tests). This module must never start servers or read the queue; it only counts.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from pko.runtime import compactmetrics

RECONCILE_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5,
    1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
)
QUEUE_BUCKETS = tuple(10.0**exponent for exponent in range(-8, 4))  # 10ns .. 1000s, as client-go

RESULTS = ("success", "error", "requeue", "requeue_after")


class Metrics:
    """All runtime metrics of one manager, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total", "Total number of reconciliations per controller",
            ["controller", "result"], registry=registry,
        )
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors_total", "Total number of reconciliation errors per controller",
            ["controller"], registry=registry,
        )
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds", "Length of time per reconciliation per controller",
            ["controller"], buckets=RECONCILE_BUCKETS, registry=registry,
        )
        self.max_concurrent = Gauge(
            "controller_runtime_max_concurrent_reconciles", "Maximum number of concurrent reconciles per controller",
            ["controller"], registry=registry,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers", "Number of currently used workers per controller",
            ["controller"], registry=registry,
        )
        labels = ["controller", "name"]
        self.queue_depth = Gauge("workqueue_depth", "Current depth of workqueue", labels, registry=registry)
        self.queue_adds = Counter("workqueue_adds_total", "Total number of adds handled by workqueue", labels,
                                  registry=registry)
        self.queue_retries = Counter("workqueue_retries_total", "Total number of retries handled by workqueue",
                                     labels, registry=registry)
        self.queue_latency = Histogram(
            "workqueue_queue_duration_seconds", "How long in seconds an item stays in workqueue before being requested",
            labels, buckets=QUEUE_BUCKETS, registry=registry,
        )
        self.work_duration = Histogram(
            "workqueue_work_duration_seconds", "How long in seconds processing an item from workqueue takes",
            labels, buckets=QUEUE_BUCKETS, registry=registry,
        )
        self.unfinished = Gauge(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by "
            "work_duration.", labels, registry=registry,
        )
        self.longest_running = Gauge(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.", labels,
            registry=registry,
        )
        self.leader = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master.",
            ["name"], registry=registry,
        )

    def controller(self, name: str) -> ControllerMetrics:
        return ControllerMetrics(self, name)


class ControllerMetrics:
    """The metrics of one controller and its queue (implements :class:`pko.runtime.workqueue.QueueMetrics`)."""

    def __init__(self, metrics: Metrics, name: str) -> None:
        self._reconcile_total = {result: metrics.reconcile_total.labels(name, result) for result in RESULTS}
        self._reconcile_errors = metrics.reconcile_errors.labels(name)
        self._reconcile_time = metrics.reconcile_time.labels(name)
        self._max_concurrent = metrics.max_concurrent.labels(name)
        self._active_workers = metrics.active_workers.labels(name)
        self._depth = metrics.queue_depth.labels(name, name)
        self._adds = metrics.queue_adds.labels(name, name)
        self._retries = metrics.queue_retries.labels(name, name)
        self._latency = metrics.queue_latency.labels(name, name)
        self._work = metrics.work_duration.labels(name, name)
        self._unfinished = metrics.unfinished.labels(name, name)
        self._longest = metrics.longest_running.labels(name, name)

    def watch_progress(self, progress: Callable[[], tuple[float, float]]) -> None:
        """Read ``(unfinished seconds, longest running seconds)`` from ``progress`` at every scrape."""
        self._unfinished.set_function(lambda: progress()[0])
        self._longest.set_function(lambda: progress()[1])

    def workers(self, count: int) -> None:
        self._max_concurrent.set(count)

    def reconcile_started(self) -> None:
        self._active_workers.inc()

    def reconcile_cancelled(self) -> None:
        self._active_workers.dec()

    def reconcile_finished(self, result: str, seconds: float) -> None:
        self._active_workers.dec()
        self._reconcile_total[result].inc()
        if result == "error":
            self._reconcile_errors.inc()
        self._reconcile_time.observe(seconds)

    # QueueMetrics
    def added(self) -> None:
        self._adds.inc()

    def depth(self, depth: int) -> None:
        self._depth.set(depth)

    def retried(self) -> None:
        self._retries.inc()

    def started(self, waited: float) -> None:
        self._latency.observe(waited)

    def finished(self, worked: float) -> None:
        self._work.observe(worked)


# --- pko's Pulumi metrics -------------------------------------------------------------------------------------

#: Seconds; Pulumi operations take from a few seconds to hours.
UPDATE_BUCKETS = (1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0)
#: What `pulumi_update_phase_duration_seconds{phase}` measures (docs/metrics.md says how each is observed).
PHASES = ("fetch", "install", "operation")
#: The resource operations counted by `pulumi_stack_resource_changes_total{op}`.
CHANGE_OPS = ("create", "update", "delete", "replace")
UPDATE_RESULTS = ("succeeded", "failed")


class PulumiMetrics:
    """pko's metrics of Pulumi updates, registered in ``registry``; one per registry (:func:`pulumi`), shared by
    the Stack, Workspace and Update controllers, which are independent of each other.

    ``stack`` labels name the Kubernetes Stack object (for an Update written by hand: its Workspace), so they join
    with ``stacks_failing{name}``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.update_duration = compactmetrics.Histogram(
            "pulumi_update_duration_seconds",
            "Time from an Update's creation to the end of its Pulumi operation, by update type and result",
            ["namespace", "stack", "type", "result"], buckets=UPDATE_BUCKETS, registry=registry,
        )
        self.phase_duration = compactmetrics.Histogram(
            "pulumi_update_phase_duration_seconds",
            "Time of the phases of a Stack's updates: fetch (the source into a new workspace), install (the "
            "program's dependencies), operation (the Pulumi operation itself)",
            ["namespace", "stack", "phase"], buckets=UPDATE_BUCKETS, registry=registry,
        )
        self.resource_changes = compactmetrics.Counter(
            "pulumi_stack_resource_changes_total",
            "Resources changed by a Stack's updates (previews excluded), by update type and operation, from the "
            "engine's summary event",
            ["namespace", "stack", "type", "op"], registry=registry,
        )
        self.last_success = compactmetrics.Gauge(
            "pulumi_stack_last_success_timestamp_seconds",
            "Unix time of the end of a Stack's last successful update, by update type",
            ["namespace", "stack", "type"], registry=registry,
        )
        self.stalled = compactmetrics.Gauge(
            "pulumi_stack_stalled",
            "1 while a Stack is Stalled (its Stalled condition is True), with the condition's reason; no series "
            "otherwise",
            ["namespace", "stack", "reason"], registry=registry,
        )
        self._stalled: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()
        # (namespace, stack) -> update type -> Unix time: a deleted Stack's series are found without a scan of
        # every Stack's (a fleet's deletion was quadratic in its size)
        self._last_success: dict[tuple[str, str], dict[str, float]] = {}

    def update_finished(self, namespace: str, stack: str, type_: str, succeeded: bool, *, seconds: float,
                        operation_seconds: float, changes: Mapping[str, int] | None, ended_at: float) -> None:
        """One Update's operation ended (`seconds` since its creation, `operation_seconds` of which in the
        Pulumi operation; `ended_at` Unix time)."""
        result = UPDATE_RESULTS[0] if succeeded else UPDATE_RESULTS[1]
        self.update_duration.observe((namespace, stack, type_, result), max(0.0, seconds))
        self.phase(namespace, stack, "operation", operation_seconds)
        if changes is not None and type_ != "preview":  # a preview changes nothing
            for op in CHANGE_OPS:  # zeros too: each series exists from the first update on, so rate() sees it
                self.resource_changes.inc((namespace, stack, type_, op), max(0, changes.get(op, 0)))
        if succeeded:
            self.succeeded_at(namespace, stack, type_, ended_at)

    def phase(self, namespace: str, stack: str, phase: str, seconds: float) -> None:
        self.phase_duration.observe((namespace, stack, phase), max(0.0, seconds))

    def succeeded_at(self, namespace: str, stack: str, type_: str, timestamp: float) -> None:
        """Record a success at `timestamp` unless a later one is recorded (a Stack's status seeds this after a
        restart, and may be older than an Update just observed)."""
        with self._lock:
            recorded = self._last_success.setdefault((namespace, stack), {})
            if timestamp > recorded.get(type_, 0.0):
                recorded[type_] = timestamp
                self.last_success.set((namespace, stack, type_), timestamp)

    def stack_stalled(self, namespace: str, stack: str, reason: str | None) -> None:
        """The Stack is Stalled for `reason`, or (None) is not."""
        with self._lock:
            before = self._stalled.get((namespace, stack))
            if before == reason:
                return
            if before is not None:
                self.stalled.remove(namespace, stack, before)
                del self._stalled[(namespace, stack)]
            if reason is not None:
                self.stalled.set((namespace, stack, reason), 1)
                self._stalled[(namespace, stack)] = reason

    def forget_stack(self, namespace: str, stack: str) -> None:
        """A deleted Stack has no last success and is not stalled any more (its counters and histograms stay:
        they count what happened)."""
        self.stack_stalled(namespace, stack, None)
        with self._lock:
            for type_ in self._last_success.pop((namespace, stack), {}):
                self.last_success.remove(namespace, stack, type_)


_PULUMI: weakref.WeakKeyDictionary[CollectorRegistry, PulumiMetrics] = weakref.WeakKeyDictionary()
_PULUMI_LOCK = threading.Lock()


def pulumi(registry: CollectorRegistry) -> PulumiMetrics:
    """The :class:`PulumiMetrics` of `registry`, created on first use (a registry refuses a name twice)."""
    with _PULUMI_LOCK:
        found = _PULUMI.get(registry)
        if found is None:
            found = _PULUMI[registry] = PulumiMetrics(registry)
        return found


# --- the pool of active workspaces (--max-active-workspaces) ---------------------------------------------------

class PoolView(Protocol):
    size: int

    def active(self) -> int: ...

    def waiting(self) -> int: ...


def workspace_pool(registry: CollectorRegistry, pool: PoolView) -> None:
    """The pool's size, its slots in use and its queue's depth, read when scraped."""
    for name, help_text, read in (
            ("pko_workspace_pool_slots", "Slots of the pool of active workspaces (--max-active-workspaces)",
             lambda: float(pool.size)),
            ("pko_workspace_pool_active", "Workspaces holding a slot (their agent runs or is starting)",
             lambda: float(pool.active())),
            ("pko_workspace_pool_queue_depth", "Workspaces waiting for a slot",
             lambda: float(pool.waiting()))):
        Gauge(name, help_text, registry=registry).set_function(read)


# --- the dependency cache (pko.depcache) ----------------------------------------------------------------------

#: How the dependency cache answered a request (`pko_dependency_cache_requests_total{result}`).
CACHE_RESULTS = ("hit", "miss", "stale", "refused", "not_found", "error")


class DependencyCacheMetrics:
    """The dependency cache's counters, by part (plugins, npm, go): requests by result, bytes fetched from the
    upstreams and bytes served to workspaces (their ratio is what the cache saves), and its size on disk."""

    def __init__(self, registry: CollectorRegistry, size: Callable[[], float]) -> None:
        self.requests = Counter(
            "pko_dependency_cache_requests_total",
            "Requests to the dependency cache, by part and how they were answered (hit: from the cache; miss: "
            "fetched from the upstream; stale: an expired index served because the upstream failed)",
            ["part", "result"], registry=registry,
        )
        self.upstream_bytes = Counter(
            "pko_dependency_cache_upstream_bytes_total", "Bytes the dependency cache fetched from its upstreams",
            ["part"], registry=registry,
        )
        self.served_bytes = Counter(
            "pko_dependency_cache_served_bytes_total", "Bytes the dependency cache served to workspaces",
            ["part"], registry=registry,
        )
        self.size = Gauge("pko_dependency_cache_size_bytes", "Bytes the dependency cache holds on disk",
                          registry=registry)
        self.size.set_function(size)
