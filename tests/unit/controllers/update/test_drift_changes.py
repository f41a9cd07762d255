"""What a drift check reports, from the engine events of its `preview --refresh` (state in, `status.drift` out).

The event stream below is the order and shape the real CLI writes (3.259, a dynamic provider): the refresh steps
first (op `refresh` for every resource), then the preview steps, with `b` deleted and `a` changed outside Pulumi.
"""

from __future__ import annotations

import datetime
from typing import Any

from pko.api import update as up_api
from pko.api.meta import ObjectMeta
from pko.controllers.update import drift, plan

PREFIX = "urn:pulumi:dev::drift-exp::"
STACK = f"{PREFIX}pulumi:pulumi:Stack::drift-exp-dev"
PROVIDER = f"{PREFIX}pulumi:providers:pulumi-python::default"
A, B, C = (f"{PREFIX}pulumi-python:dynamic:Resource::{n}" for n in "abc")
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def _pre(op: str, urn: str, type_: str = "pulumi-python:dynamic:Resource") -> dict[str, Any]:
    return {"sequence": 1, "resourcePreEvent": {"metadata": {"op": op, "urn": urn, "type": type_, "old": {},
                                                             "new": {}, "detailedDiff": None}, "planning": True}}


def _outputs(op: str, urn: str) -> dict[str, Any]:
    return {"resOutputsEvent": {"metadata": {"op": op, "urn": urn, "type": "x"}, "planning": True}}


REAL_STREAM = [
    {"preludeEvent": {"config": {}}},
    _pre("refresh", STACK, "pulumi:pulumi:Stack"), _pre("refresh", PROVIDER, "pulumi:providers:pulumi-python"),
    _pre("refresh", B), _pre("refresh", A), _pre("refresh", C),
    _outputs("refresh", B), _outputs("refresh", A),
    {"diagnosticEvent": {"message": "warning", "severity": "warning"}},
    _pre("same", STACK, "pulumi:pulumi:Stack"), _pre("same", PROVIDER, "pulumi:providers:pulumi-python"),
    _pre("create", B), _outputs("create", B), _pre("update", A), _outputs("update", A), _pre("same", C),
    {"summaryEvent": {"resourceChanges": {"create": 1, "same": 2, "update": 1}, "isPreview": True}},
    {"cancelEvent": {}},
]


def _collect(events: list[dict[str, Any]]) -> dict[str, Any]:
    collector = drift.Collector()
    for event in events:
        collector.observe(event)
    return collector.result()


def test_the_preview_steps_after_the_refresh_are_the_drift() -> None:
    assert _collect(REAL_STREAM) == {
        "resources": [{"urn": A, "op": "update"}, {"urn": B, "op": "create"}],
        "changes": {"create": 1, "update": 1},
    }


def test_no_change_is_no_drift() -> None:
    events = [_pre("refresh", A), _pre("same", A), _pre("same", STACK, "pulumi:pulumi:Stack")]
    assert _collect(events) == {"resources": [], "changes": {}}


def test_a_replacement_is_one_replace_and_the_stack_resource_never_drifts() -> None:
    events = [_pre("create-replacement", A), _pre("replace", A), _pre("delete-replaced", A), _pre("delete", B),
              _pre("update", STACK, "pulumi:pulumi:Stack"), _pre("update", C), _pre("delete", C)]
    assert _collect(events) == {
        "resources": [{"urn": A, "op": "replace"}, {"urn": B, "op": "delete"}, {"urn": C, "op": "delete"}],
        "changes": {"delete": 2, "replace": 1},
    }


def test_the_list_is_capped_but_the_counts_are_not() -> None:
    many = [_pre("update", f"{PREFIX}t::r{i:04d}") for i in range(up_api.MAX_DRIFTED_RESOURCES + 30)]
    result = _collect(many)
    assert len(result["resources"]) == up_api.MAX_DRIFTED_RESOURCES
    assert result["resources"][0]["urn"] == f"{PREFIX}t::r0000"
    assert result["changes"] == {"update": up_api.MAX_DRIFTED_RESOURCES + 30}


def test_malformed_events_are_ignored() -> None:
    assert _collect([{"resourcePreEvent": None}, {"resourcePreEvent": {"metadata": "x"}},
                     {"resourcePreEvent": {"metadata": {"op": "update"}}}]) == {"resources": [], "changes": {}}


def test_only_labelled_updates_are_drift_checks() -> None:
    def update(labels: dict[str, str] | None) -> up_api.Update:
        return up_api.Update(metadata=ObjectMeta(name="u", labels=labels))
    assert drift.is_drift_check(update({up_api.LABEL_DRIFT_CHECK: "true"}))
    assert not drift.is_drift_check(update({"pulumi.com/stack-name": "s"}))
    assert not drift.is_drift_check(update(None))


def test_the_result_goes_to_the_update_status_only_when_present() -> None:
    update = up_api.Update(metadata=ObjectMeta(name="u", namespace="n", generation=1))
    outcome = plan.from_result("succeeded", "", "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z", None, None, None)
    assert "drift" not in plan.status_body(update, outcome, NOW)
    outcome.drift = {"resources": [], "changes": {}}
    assert plan.status_body(update, outcome, NOW)["drift"] == {"resources": [], "changes": {}}
