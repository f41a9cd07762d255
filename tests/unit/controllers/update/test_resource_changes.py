"""pko's change summary of an Update (docs/metrics.md): the counts of the engine's summary event go into
`status.resourceChanges` and into the UpdateSucceeded/UpdateFailed event; the Stack copies them into
`status.lastUpdate.resourceChanges` and its own events. No summary event: the Go operator's status and messages."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from pko.api import stack as stack_api
from pko.api import update as up_api
from pko.controllers.stack import sync
from pko.controllers.update import plan

T0 = datetime.datetime(2025, 3, 1, 12, 0, 0, tzinfo=datetime.UTC)


def _update(status: dict[str, Any] | None = None, *, type_: str = "up",
            owners: list[dict[str, Any]] | None = None) -> up_api.Update:
    meta: dict[str, Any] = {"name": "web-1a2b", "namespace": "team", "generation": 1}
    if owners is not None:
        meta["ownerReferences"] = owners
    return up_api.Update.model_validate({"metadata": meta, "status": status,
                                         "spec": {"workspaceName": "web-ws", "stackName": "dev", "type": type_}})


def test_the_summary_event_counts_become_integers() -> None:
    # the agent protocol carries events as a protobuf Struct: numbers arrive as floats
    event = {"sequence": 9.0, "summaryEvent": {"maybeCorrupt": False, "durationSeconds": 2.0,
                                               "resourceChanges": {"create": 3.0, "update": 1.0, "same": 4.0}}}
    assert plan.resource_changes(event) == {"create": 3, "update": 1, "same": 4}


@pytest.mark.parametrize("event", [{"resOutputsEvent": {"metadata": {"op": "create"}}}, {"sequence": 1}])
def test_other_events_carry_no_counts(event: dict[str, Any]) -> None:
    assert plan.resource_changes(event) is None


def test_a_summary_without_changes_counts_nothing() -> None:
    assert plan.resource_changes({"summaryEvent": {"maybeCorrupt": False}}) == {}


def test_the_status_carries_the_counts_when_there_were_some() -> None:
    outcome = plan.from_result("succeeded", "", "2025-03-01T12:00:00Z", "2025-03-01T12:01:00Z", None, None, None)
    assert "resourceChanges" not in plan.status_body(_update(), outcome, T0)  # as the Go operator writes it
    outcome.resource_changes = {"create": 3, "same": 1}
    assert plan.status_body(_update(), outcome, T0)["resourceChanges"] == {"create": 3, "same": 1}


def test_a_later_status_keeps_the_counts() -> None:
    body = plan.status_body(_update({"resourceChanges": {"delete": 2}}), plan.failed(plan.REASON_ABORTED), T0)
    assert body["resourceChanges"] == {"delete": 2}


def test_the_crd_accepts_the_counts_as_the_model_reads_them() -> None:
    update = _update({"resourceChanges": {"create": 3, "create-replacement": 1}})
    assert update.status is not None
    assert update.status.resource_changes == {"create": 3, "create-replacement": 1}


@pytest.mark.parametrize(("changes", "planned", "expected"), [
    ({"create": 3, "update": 1, "same": 7}, False, "3 created, 1 updated, 0 deleted"),
    ({"replace": 2, "delete": 1}, False, "0 created, 0 updated, 1 deleted, 2 replaced"),
    ({}, False, "0 created, 0 updated, 0 deleted"),
    ({"create": 2}, True, "2 to create, 0 to update, 0 to delete"),
])
def test_the_one_line_summary(changes: dict[str, int], planned: bool, expected: str) -> None:
    assert up_api.describe_changes(changes, planned=planned) == expected


def test_update_events_name_the_changes() -> None:
    done = plan.from_result("succeeded", "", None, None, None, None, None)
    assert plan.event_message(done, "up") == "Successfully updated the stack"  # no summary: as before
    done.resource_changes = {"create": 3, "update": 1}
    assert plan.event_message(done, "up") == "Successfully updated the stack: 3 created, 1 updated, 0 deleted"
    assert plan.event_message(done, "preview") == ("Successfully updated the stack: 3 to create, 1 to update, "
                                                   "0 to delete")
    broken = plan.from_error("boom", None)
    assert plan.event_message(broken, "up") == "Failed to update the stack: boom"
    broken.resource_changes = {"create": 1}
    assert plan.event_message(broken, "up") == "Failed to update the stack (1 created, 0 updated, 0 deleted): boom"


def test_the_stack_label_is_the_owning_stack_else_the_workspace() -> None:
    stack_owner = {"apiVersion": "pulumi.com/v1", "kind": "Stack", "name": "web", "uid": "u1"}
    workspace_owner = {"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace", "name": "web-ws", "uid": "u2",
                       "controller": True}
    assert plan.stack_label(_update(owners=[workspace_owner, stack_owner])) == "web"
    assert plan.stack_label(_update(owners=[workspace_owner])) == "web-ws"
    assert plan.stack_label(_update()) == "web-ws"


# --- the Stack ---------------------------------------------------------------------------------------------------

CURRENT = stack_api.CurrentStackUpdate(generation=2, name="web-1a2b", commit="c2")


def _finished(changes: dict[str, int] | None, *, message: str = "") -> up_api.Update:
    status: dict[str, Any] = {"message": message}
    if changes is not None:
        status["resourceChanges"] = changes
    return _update(status)


def test_last_update_copies_the_counts_of_a_success_and_of_a_failure() -> None:
    assert sync.record_success(CURRENT, _finished({"create": 3}), T0).resource_changes == {"create": 3}
    failed = sync.record_failure(CURRENT, _finished({"create": 1, "delete": 0}), None, T0)
    assert failed.resource_changes == {"create": 1, "delete": 0}


def test_last_update_without_counts_is_the_go_operators() -> None:
    last = sync.record_success(CURRENT, _finished(None), T0)
    dumped = last.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert "resourceChanges" not in dumped
    assert sorted(dumped) == ["generation", "lastAttemptedCommit", "lastResyncTime", "lastSuccessfulCommit", "name",
                              "state", "type"]


def test_stack_events_name_the_changes() -> None:
    assert sync.update_event_message(_finished(None), False) == "Successfully updated stack"
    assert sync.update_event_message(_finished({"create": 3, "update": 1}), False) == (
        "Successfully updated stack: 3 created, 1 updated, 0 deleted")
    assert sync.update_event_message(_finished(None, message="boom"), True) == "Failed to update stack: boom"
    assert sync.update_event_message(_finished({"update": 1}, message="boom"), True) == (
        "Failed to update stack (0 created, 1 updated, 0 deleted): boom")
