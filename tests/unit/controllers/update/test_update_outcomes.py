"""The status an Update's outcome produces (pko-v2 §3.3 steps 2-7): conditions, status body, outputs Secret."""

from __future__ import annotations

import base64
import datetime
import json
from typing import Any

import pytest

from pko.api import update as up_api
from pko.controllers.update import plan

T0 = datetime.datetime(2025, 3, 1, 12, 0, 0, tzinfo=datetime.UTC)
T1 = T0 + datetime.timedelta(minutes=3)


def _update(status: dict[str, Any] | None = None, generation: int = 4, name: str = "stack-1a2b") -> up_api.Update:
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "team", "generation": generation},
        "spec": {"workspaceName": "stack", "stackName": "dev", "type": "up"},
    }
    if status is not None:
        body["status"] = status
    return up_api.Update.model_validate(body)


def _conditions(body: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in body["conditions"]}


def _body(outcome: plan.Outcome, update: up_api.Update | None = None, now: datetime.datetime = T0
          ) -> dict[str, Any]:
    return plan.status_body(update or _update(), outcome, now)


# --- outcomes ----------------------------------------------------------------------------------------------------


def test_started_sets_all_three_conditions_progressing() -> None:
    body = _body(plan.started())
    assert _conditions(body) == {
        "Progressing": ("True", "Progressing", ""),
        "Failed": ("False", "Progressing", ""),
        "Complete": ("False", "Progressing", ""),
    }
    assert [c["type"] for c in body["conditions"]] == ["Progressing", "Failed", "Complete"]
    assert all(c["observedGeneration"] == 4 for c in body["conditions"])
    assert all(c["lastTransitionTime"] == "2025-03-01T12:00:00Z" for c in body["conditions"])
    assert body["observedGeneration"] == 4
    # applied empty, as the Go operator's apply configuration does
    assert (body["message"], body["permalink"], body["outputs"]) == ("", "", "")


@pytest.mark.parametrize("reason", ["Aborted", "Canceled"])
def test_failed_marks_the_update_complete_and_failed(reason: str) -> None:
    body = _body(plan.failed(reason))
    assert _conditions(body) == {
        "Progressing": ("False", "Failed", ""),
        "Failed": ("True", reason, ""),
        "Complete": ("True", "Failed", ""),
    }
    assert body["message"] == ""


def test_a_failure_message_of_any_length_is_written_with_its_end() -> None:
    """The Go agent ends a failed operation with the CLI's whole output: a status over etcd's request limit could
    never be written (the result lost, retried for ever). The status keeps the head and the end, where the error is."""
    output = "line of progress\n" * 200_000 + "error: the real cause"
    message = _body(plan.from_error(output, None))["message"]
    assert len(message) == plan.MAX_MESSAGE
    assert message.startswith("line of progress")
    assert message.endswith("error: the real cause")
    start = message.index("\n… ")
    end = message.index(" …\n", start) + len(" …\n")
    cut = int(message[start + len("\n… "):].split(" characters cut", 1)[0])
    assert len(message[:start]) + len(message[end:]) + cut == len(output)  # what it says was cut, was
    assert _body(plan.from_error("short", None))["message"] == "short"


def test_failed_with_a_message_reports_it() -> None:
    body = _body(plan.failed("InvalidSpec", 'unsupported update type "upp"'))
    assert _conditions(body)["Failed"] == ("True", "InvalidSpec", 'unsupported update type "upp"')
    assert body["message"] == 'unsupported update type "upp"'


@pytest.mark.parametrize("reason", ["WorkspaceNotFound", "WorkspaceNotReady", "TransientFailure"])
def test_waiting_is_not_progressing_and_not_complete(reason: str) -> None:
    body = _body(plan.waiting(reason, "why"))
    assert _conditions(body) == {
        "Progressing": ("False", reason, "why"),
        "Failed": ("False", "Progressing", ""),
        "Complete": ("False", "Progressing", ""),
    }


def test_succeeded_result() -> None:
    outcome = plan.from_result("succeeded", "update message", "2025-03-01T12:00:01Z", "2025-03-01T12:00:09Z",
                               "https://app.example/stack/1", {"name": "proj", "runtime": "python"},
                               "stack-1a2b-stack-outputs")
    body = _body(outcome)
    assert _conditions(body) == {
        "Progressing": ("False", "Complete", ""),
        "Failed": ("False", "UpdateSucceeded", ""),  # the message is in status.message only, as the Go operator
        "Complete": ("True", "Updated", ""),
    }
    assert body["message"] == "update message"
    assert body["startTime"] == "2025-03-01T12:00:01Z"
    assert body["endTime"] == "2025-03-01T12:00:09Z"
    assert body["permalink"] == "https://app.example/stack/1"
    assert body["projectInfo"] == {"name": "proj", "runtime": "python"}
    assert body["outputs"] == "stack-1a2b-stack-outputs"


@pytest.mark.parametrize("result", ["failed", "in-progress", "not-started", ""])
def test_any_other_result_failed(result: str) -> None:
    body = _body(plan.from_result(result, "2 errors", None, None, None, None, None))
    assert _conditions(body) == {
        "Progressing": ("False", "Complete", ""),
        "Failed": ("True", "UpdateFailed", ""),
        "Complete": ("True", "Updated", ""),
    }
    assert body["message"] == "2 errors"
    for key in ("startTime", "endTime", "projectInfo"):
        assert key not in body
    assert (body["permalink"], body["outputs"]) == ("", "")


def test_error_without_pulumi_error_info_is_unknown() -> None:
    body = _body(plan.from_error("up failed: exit status 255", None))
    assert _conditions(body) == {
        "Progressing": ("False", "Complete", ""),
        "Failed": ("True", "Unknown", "up failed: exit status 255"),
        "Complete": ("True", "Updated", ""),
    }
    assert body["message"] == "up failed: exit status 255"


def test_error_with_pulumi_error_info_takes_its_reason() -> None:
    body = _body(plan.from_error("Another update is currently in progress", "UpdateConflict"))
    assert _conditions(body)["Failed"] == ("True", "UpdateConflict", "Another update is currently in progress")
    assert _conditions(body)["Complete"] == ("True", "Updated", "")


@pytest.mark.parametrize("message", [None, ""])
def test_error_without_a_message(message: str | None) -> None:
    body = _body(plan.from_error(message, None))
    assert body["message"] == "An unknown error occurred"
    assert _conditions(body)["Failed"] == ("True", "Unknown", "An unknown error occurred")


# --- status_body -------------------------------------------------------------------------------------------------


PREVIOUS = {
    "observedGeneration": 3,
    "startTime": "2025-03-01T11:00:00Z",
    "endTime": "2025-03-01T11:05:00Z",
    "permalink": "https://app.example/old",
    "message": "old message",
    "outputs": "old-stack-outputs",
    "projectInfo": {"name": "old", "runtime": "yaml"},
    "conditions": [
        {"type": "Progressing", "status": "True", "reason": "Progressing", "message": "",
         "lastTransitionTime": "2025-03-01T11:00:00Z", "observedGeneration": 3},
        {"type": "Failed", "status": "False", "reason": "Progressing", "message": "",
         "lastTransitionTime": "2025-03-01T11:00:00Z", "observedGeneration": 3},
        {"type": "Complete", "status": "False", "reason": "Progressing", "message": "",
         "lastTransitionTime": "2025-03-01T11:00:00Z", "observedGeneration": 3},
    ],
}


def test_status_body_keeps_fields_the_outcome_does_not_set() -> None:
    body = _body(plan.started(), _update(PREVIOUS), T1)
    assert body["observedGeneration"] == 4
    for key in ("startTime", "endTime", "permalink", "message", "outputs", "projectInfo"):
        assert body[key] == PREVIOUS[key], key


def test_status_body_overrides_fields_the_outcome_sets() -> None:
    outcome = plan.from_result("succeeded", "new", "2025-03-01T12:01:00Z", "2025-03-01T12:02:00Z",
                               "https://app.example/new", {"name": "new", "runtime": "python"}, "new-stack-outputs")
    body = _body(outcome, _update(PREVIOUS), T1)
    assert body["startTime"] == "2025-03-01T12:01:00Z"
    assert body["endTime"] == "2025-03-01T12:02:00Z"
    assert body["permalink"] == "https://app.example/new"
    assert body["message"] == "new"
    assert body["outputs"] == "new-stack-outputs"
    assert body["projectInfo"] == {"name": "new", "runtime": "python"}


def test_status_body_last_transition_time_moves_only_when_the_status_changes() -> None:
    outcome = plan.from_result("failed", "boom", None, None, None, None, None)
    body = _body(outcome, _update(PREVIOUS), T1)
    times = {c["type"]: c["lastTransitionTime"] for c in body["conditions"]}
    assert times == {
        "Progressing": "2025-03-01T12:03:00Z",  # True → False
        "Failed": "2025-03-01T12:03:00Z",  # False → True
        "Complete": "2025-03-01T12:03:00Z",  # False → True
    }
    # The same status with a different reason keeps the time; the reason, message and generation follow.
    body = _body(plan.waiting("WorkspaceNotReady", "not ready"), _update(PREVIOUS), T1)
    found = {c["type"]: c for c in body["conditions"]}
    assert found["Failed"]["lastTransitionTime"] == "2025-03-01T11:00:00Z"
    assert found["Complete"]["lastTransitionTime"] == "2025-03-01T11:00:00Z"
    assert found["Progressing"]["lastTransitionTime"] == "2025-03-01T12:03:00Z"
    assert found["Progressing"]["reason"] == "WorkspaceNotReady"
    assert all(c["observedGeneration"] == 4 for c in body["conditions"])


def test_status_body_keeps_unrelated_conditions_in_place() -> None:
    previous = dict(PREVIOUS, conditions=[{"type": "Custom", "status": "True", "reason": "Mine", "message": "x",
                                           "lastTransitionTime": "2025-01-01T00:00:00Z"}])
    body = _body(plan.started(), _update(previous), T1)
    assert [c["type"] for c in body["conditions"]] == ["Custom", "Progressing", "Failed", "Complete"]
    assert body["conditions"][0]["lastTransitionTime"] == "2025-01-01T00:00:00Z"


def test_status_body_round_trips_through_the_model() -> None:
    body = _body(plan.failed("Canceled"), _update(PREVIOUS), T1)
    status = up_api.UpdateStatus.model_validate(body)
    assert status.to_wire() == body


# --- outputs_secret ----------------------------------------------------------------------------------------------


def test_outputs_secret() -> None:
    outputs = {
        "url": (b'"https://example.com"', False),
        "nested": (b'{"a":[1,2]}', False),
        "db password": (b'"hunter2"', True),
        "api/key:v1": (b'"k"', True),
        "a.b-c_d": (b"42", False),
    }
    secret = plan.outputs_secret(_update(name="stack-1a2b"), outputs)

    assert secret["apiVersion"] == "v1"
    assert secret["kind"] == "Secret"
    assert secret["type"] == "Opaque"
    assert secret["immutable"] is True
    assert secret["metadata"]["name"] == "stack-1a2b-stack-outputs"
    assert secret["metadata"]["namespace"] == "team"
    assert secret["metadata"]["labels"] == {
        "auto.pulumi.com/component": "update", "auto.pulumi.com/update-name": "stack-1a2b",
    }
    assert set(secret["data"]) == {"url", "nested", "db_password", "api_key_v1", "a.b-c_d"}
    decoded = {k: json.loads(base64.b64decode(v)) for k, v in secret["data"].items()}
    assert decoded == {"url": "https://example.com", "nested": {"a": [1, 2]}, "db_password": "hunter2",
                       "api_key_v1": "k", "a.b-c_d": 42}
    assert secret["metadata"]["annotations"] == {"pulumi.com/secrets": '["api_key_v1","db_password"]'}


def test_outputs_secret_key_sanitising_is_per_character() -> None:
    secret = plan.outputs_secret(_update(), {"ü ñ@x": (b"1", False), "-._azAZ09": (b"2", False)})
    assert set(secret["data"]) == {"____x", "-._azAZ09"}


def test_outputs_secret_without_secret_outputs_annotates_an_empty_list() -> None:
    secret = plan.outputs_secret(_update(), {"x": (b"1", False)})
    assert secret["metadata"]["annotations"] == {"pulumi.com/secrets": "[]"}


def test_outputs_secret_secret_keys_are_sorted() -> None:
    outputs = {name: (b"null", True) for name in ("zeta", "alpha", "Mid", "beta")}
    secret = plan.outputs_secret(_update(), outputs)
    assert json.loads(secret["metadata"]["annotations"]["pulumi.com/secrets"]) == ["Mid", "alpha", "beta", "zeta"]
