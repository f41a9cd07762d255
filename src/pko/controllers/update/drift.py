"""The result of a drift check, read from the engine events of its `pulumi preview --refresh` — pure.

Why: the agent's PreviewResult carries no per-resource detail (a preview has no summary), but the engine events
it streams do: after the refresh steps (op `refresh`), each resource's `resourcePreEvent` says what an update would
do to it. For a Stack whose program and config are unchanged since its last successful update, every such change
is drift. The Update controller feeds the events of a drift-check Update (labelled `pulumi.com/drift-check`) here
and writes the result to that Update's `status.drift`, where the Stack controller reads it.

Must never: keep more than `MAX_DRIFTED_RESOURCES` URNs (a status must stay small), or look at property values
(they may be secret): only the URN, type and operation are read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pko.api import update as up_api

# Engine step operations → the kind of change reported; every other op (same, read, refresh, discard, ...) changes
# nothing in the cloud. A replacement shows as several steps (create-replacement, replace, delete-replaced).
CHANGE_OPS = {
    "create": "create", "update": "update", "delete": "delete", "replace": "replace",
    "create-replacement": "replace", "delete-replaced": "replace", "import": "import",
    "import-replacement": "replace",
}
# When one URN has several steps, the strongest kind wins.
_RANK = {"update": 0, "import": 1, "create": 2, "delete": 3, "replace": 4}
# The stack's own resource changes with its outputs; it is not a cloud resource that can drift.
STACK_TYPE = "pulumi:pulumi:Stack"


def is_drift_check(update: up_api.Update) -> bool:
    return (update.metadata.labels or {}).get(up_api.LABEL_DRIFT_CHECK) == "true"


@dataclass
class Collector:
    """Accumulates the changed resources of one preview, event by event."""

    changes: dict[str, str] = field(default_factory=dict)  # URN → kind

    def observe(self, event: Mapping[str, Any]) -> None:
        pre = event.get("resourcePreEvent")
        if not isinstance(pre, Mapping):
            return
        metadata = pre.get("metadata")
        if not isinstance(metadata, Mapping):
            return
        kind = CHANGE_OPS.get(str(metadata.get("op") or ""))
        urn = str(metadata.get("urn") or "")
        if kind is None or not urn or metadata.get("type") == STACK_TYPE:
            return
        known = self.changes.get(urn)
        if known is None or _RANK[kind] > _RANK[known]:
            self.changes[urn] = kind

    def result(self) -> dict[str, Any]:
        """`status.drift` of the Update: the changed resources by URN (sorted, capped) and the count per kind."""
        counts: dict[str, int] = {}
        for kind in self.changes.values():
            counts[kind] = counts.get(kind, 0) + 1
        listed = sorted(self.changes.items())[:up_api.MAX_DRIFTED_RESOURCES]
        return up_api.UpdateDrift(
            resources=[up_api.DriftedResource(urn=urn, op=kind) for urn, kind in listed],
            changes=dict(sorted(counts.items())),
        ).to_wire()
