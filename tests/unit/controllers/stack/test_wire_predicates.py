"""The Stack controller's watch predicates read Workspaces and Updates from the wire object, not a model of it; they
must decide as the reconciler's model-level rules (:mod:`pko.controllers.stack.steps`) do, for every mix of
deletion, generations and conditions."""

from __future__ import annotations

import itertools
from typing import Any

from pko.api import conditions
from pko.api import update as up_api
from pko.api import workspace as ws_api
from pko.controllers.stack import setup, steps

STATUSES = (None, "True", "False", "Unknown")


def _conditions(**by_type: str | None) -> list[dict[str, Any]]:
    return [{"type": type_, "status": status, "reason": "R", "message": "",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}
            for type_, status in by_type.items() if status is not None]


def _workspace(deleting: bool, generation: int | None, observed: int | None, ready: str | None,
               stalled: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "w", "namespace": "ns"}
    if generation is not None:
        meta["generation"] = generation
    if deleting:
        meta |= {"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["x"]}
    status: dict[str, Any] = {"conditions": _conditions(Ready=ready, Stalled=stalled)}
    if observed is not None:
        status["observedGeneration"] = observed
    return {"apiVersion": ws_api.API_VERSION, "kind": ws_api.KIND, "metadata": meta, "spec": {}, "status": status}


def test_the_workspace_signal_is_the_model_rule_read_from_the_wire() -> None:
    seen = set()
    for deleting, generation, observed, ready, stalled in itertools.product(
            (False, True), (None, 1, 2), (None, 0, 1, 2), STATUSES, STATUSES):
        obj = _workspace(deleting, generation, observed, ready, stalled)
        model = ws_api.Workspace.model_validate(obj)
        expected = steps.workspace_ready(model) or conditions.is_true(
            model.status.conditions if model.status else None, conditions.STALLED)
        assert setup.workspace_signal(obj) is expected, obj
        seen.add(expected)
    assert seen == {True, False}


def test_a_workspace_without_a_status_is_no_signal() -> None:
    obj = _workspace(False, 1, None, None, None)
    del obj["status"]
    assert setup.workspace_signal(obj) is False


def test_an_update_is_finished_as_the_model_rule_says() -> None:
    seen = set()
    for complete, generation, observed in itertools.product(STATUSES, (None, 1, 2), (None, 1, 2)):
        status: dict[str, Any] = {"conditions": _conditions(Complete=complete)}
        if observed is not None:
            status["observedGeneration"] = observed
        meta: dict[str, Any] = {"name": "u", "namespace": "ns"} | ({"generation": generation} if generation else {})
        obj = {"apiVersion": up_api.API_VERSION, "kind": up_api.KIND, "metadata": meta,
               "spec": {"stackName": "s"}, "status": status}
        expected = steps.update_finished(up_api.Update.model_validate(obj))
        assert setup.update_finished(obj) is expected
        seen.add(expected)
    assert seen == {True, False}
