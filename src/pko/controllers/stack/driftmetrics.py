"""pko's drift-check metrics, kept from the Stack cache like `stacks_failing`: `pulumi_stack_drifted{namespace,name}`
(1 when the Stack's last drift check found drift, 0 otherwise; only Stacks with `spec.driftDetection` have the
series) and the histogram `pulumi_stack_drift_check_duration_seconds{result}` (each finished check, from its
Update's creation to its end, as `status.drift.lastCheck` records them).

Why from the cache: the Stack's status is the record of every check, so the metrics need no hook in the
reconciler and agree with what `kubectl get stack -o yaml` shows. Must never: observe a check twice (only a
change of `lastCheck` between two versions of a Stack counts, so a restart's initial list observes nothing).
"""

from __future__ import annotations

import contextlib
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram

from pko.api import conditions
from pko.runtime import store

DURATION_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)


def _drift(obj: dict[str, Any]) -> dict[str, Any]:
    return dict((obj.get("status") or {}).get("drift") or {})


def _drifted(obj: dict[str, Any]) -> bool:
    return any(c.get("type") == conditions.DRIFTED and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


class DriftMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.drifted = Gauge("pulumi_stack_drifted",
                             "1 when the last drift check of the stack found drift, else 0 (pko: spec.driftDetection)",
                             ["namespace", "name"], registry=registry)
        self.duration = Histogram("pulumi_stack_drift_check_duration_seconds",
                                  "Duration of drift checks (pko: spec.driftDetection)", ["result"],
                                  buckets=DURATION_BUCKETS, registry=registry)
        self._series: set[tuple[str, str]] = set()  # the Stacks with a `pulumi_stack_drifted` series

    def observe(self, event: store.Event) -> None:
        key = event.key
        enabled = event.type != "DELETED" and bool((event.object.get("spec") or {}).get("driftDetection"))
        if not enabled:
            # only a series that exists is removed: a removal looks up the environment and raises for a missing
            # one, and most Stacks never had one (every event of every Stack came here)
            if (key.namespace, key.name) in self._series:
                self._series.discard((key.namespace, key.name))
                with contextlib.suppress(KeyError):
                    self.drifted.remove(key.namespace, key.name)
            return
        self._series.add((key.namespace, key.name))
        self.drifted.labels(key.namespace, key.name).set(1 if _drifted(event.object) else 0)
        check = _drift(event.object).get("lastCheck") or {}
        before = _drift(event.old).get("lastCheck") if event.old is not None else None
        if event.type != "MODIFIED" or not check or check == before:
            return
        start = conditions.parse_time(check.get("startTime"))
        end = conditions.parse_time(check.get("endTime"))
        if start is not None and end is not None:
            self.duration.labels(check.get("result") or "unknown").observe(max(0.0, (end - start).total_seconds()))
