"""`kubectl pko`'s pure half: a Stack's state and next retry (the Stack controller's own rule), the `get` table and
`-o json`, what `retry` touches, and the `describe` text."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from pko.api import stack as stack_api
from pko.cli.ctl import view
from pko.controllers.stack import sync

NOW = datetime.datetime(2026, 9, 1, 12, 0, 0, tzinfo=datetime.UTC)
T0 = "2026-09-01T11:59:00Z"  # a minute ago


def cond(type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": T0}


def stack(name: str = "app", *, spec: dict[str, Any] | None = None, last: dict[str, Any] | None = None,
          conditions: list[dict[str, Any]] | None = None, current: dict[str, Any] | None = None) -> stack_api.Stack:
    status: dict[str, Any] = {"conditions": conditions or []}
    if last is not None:
        status["lastUpdate"] = {"generation": 1, "lastResyncTime": T0, **last}
    if current is not None:
        status["currentUpdate"] = current
    return stack_api.Stack.model_validate({
        "apiVersion": "pulumi.com/v1", "kind": "Stack",
        "metadata": {"name": name, "namespace": "ns", "generation": 1},
        "spec": {"stack": name, **(spec or {})}, "status": status,
    })


READY = [cond("Ready", "True", "ProcessingCompleted")]
RETRYING = [cond("Ready", "False", "NotReadyInProgress"), cond("Reconciling", "True", "RetryingAfterFailure")]
STALLED = [cond("Ready", "False", "NotReadyStalled"), cond("Stalled", "True", "UpdateFailed", "up failed 3 times")]


def test_state_follows_the_conditions_and_suspend_wins() -> None:
    assert view.state_of(stack(conditions=READY))[0] == "Ready"
    assert view.state_of(stack(conditions=RETRYING))[0] == "Reconciling"
    assert view.state_of(stack(conditions=STALLED))[:2] == ("Stalled", "UpdateFailed")
    assert view.state_of(stack(conditions=[]))[0] == "Reconciling"
    suspended = [*READY, cond("Reconciling", "False", "Suspended", "the stack is suspended")]
    assert view.state_of(stack(spec={"suspend": True}, conditions=suspended)) == (
        "Suspended", "Suspended", "the stack is suspended")


@pytest.mark.parametrize(("failures", "policy", "after"), [
    (0, {}, 10), (1, {}, 30), (2, {}, 90),                      # the reference's 10s·3ⁿ
    (1, {"retryPolicy": {"backoffBaseSeconds": 5, "backoffFactor": 2}}, 10),
    (2, {"retryMaxBackoffDurationSeconds": 20}, 20),           # capped
])
def test_next_retry_is_the_controllers_backoff(failures: int, policy: dict[str, Any], after: int) -> None:
    s = stack(spec=policy, last={"state": "failed", "failures": failures}, conditions=RETRYING)
    expected = datetime.datetime(2026, 9, 1, 11, 59, tzinfo=datetime.UTC) + datetime.timedelta(seconds=after)
    assert sync.next_retry_at(s) == expected
    assert view.row_of(s).next_retry == expected.strftime("%Y-%m-%dT%H:%M:%SZ")
    # the controller looks again exactly then (no branch polling here)
    assert sync.requeue_after(s, datetime.datetime(2026, 9, 1, 11, 59, tzinfo=datetime.UTC)) == after


def test_a_stalled_stack_has_no_next_retry_unless_a_stalled_retry_is_set() -> None:
    last = {"state": "failed", "failures": 3}
    assert view.row_of(stack(last=last, conditions=STALLED)).next_retry is None
    timed = stack(spec={"retryPolicy": {"stalledRetryIntervalSeconds": 3600}}, last=last, conditions=STALLED)
    assert view.row_of(timed).next_retry == "2026-09-01T12:59:00Z"
    assert view.row_of(stack(last={"state": "succeeded"}, conditions=READY)).next_retry is None


def test_the_operators_next_retry_wins() -> None:
    """pko's operator writes the time its own settings give (`--retry-backoff-base` and the like, which the CLI
    cannot see); the CLI shows that one."""
    s = stack(last={"state": "failed", "failures": 1}, conditions=RETRYING)
    assert view.row_of(s).next_retry == "2026-09-01T11:59:30Z"  # the reference's 10s·3 after the failure
    written = s.model_copy(update={"status": s.status.model_copy(update={"next_retry_time": "2026-09-01T13:00:00Z"})})
    assert view.row_of(written).next_retry == "2026-09-01T13:00:00Z"


def test_table_columns_and_ages() -> None:
    rows = [view.row_of(stack("ok", last={"state": "succeeded", "type": "up", "name": "ok-1"}, conditions=READY)),
            view.row_of(stack("bad", last={"state": "failed", "type": "up", "failures": 1}, conditions=RETRYING,
                              current={"name": "bad-2"}))]
    text = view.table(rows, NOW)
    lines = text.splitlines()
    assert lines[0].split() == ["NAME", "STATE", "LAST", "UPDATE", "FAILURES", "NEXT", "RETRY", "SUSPENDED"]
    assert lines[1].split() == ["ok", "Ready", "up/succeeded", "60s", "0", "-", "no"]
    assert lines[2].split() == ["bad", "Reconciling", "up/failed", "60s", "(running)", "1",
                                "2026-09-01T11:59:30Z", "(due)", "no"]
    wide = view.table(rows, NOW, wide=True, all_namespaces=True).splitlines()
    assert wide[0].split()[0] == "NAMESPACE"
    assert wide[0].split()[-4:] == ["UPDATE", "COMMIT", "REASON", "MESSAGE"]
    assert wide[1].split()[:2] == ["ns", "ok"]


def test_ages_like_kubectl() -> None:
    assert view.age("2026-09-01T11:59:15Z", NOW) == "45s"
    assert view.age("2026-09-01T11:57:00Z", NOW) == "3m"
    assert view.age("2026-09-01T09:00:00Z", NOW) == "3h"
    assert view.age("2026-08-28T12:00:00Z", NOW) == "4d"
    assert view.age("2026-09-01T12:03:00Z", NOW) == "in 3m"
    assert view.age(None, NOW) == "-"
    assert view.until("2026-09-01T12:03:00Z", NOW) == "in 3m"
    assert view.until("2026-09-01T11:59:00Z", NOW) == "due"


def test_json_output_has_every_field() -> None:
    doc = json.loads(view.dump([view.row_of(stack(last={"state": "failed", "failures": 2}, conditions=RETRYING))],
                               "json"))
    item = doc["items"][0]
    assert (item["namespace"], item["name"], item["state"], item["failures"]) == ("ns", "app", "Reconciling", 2)
    assert item["next_retry"] == "2026-09-01T12:00:30Z"
    assert item["suspended"] is False


def test_retry_touches_stalled_and_failing_stacks_only_unless_forced() -> None:
    ok = stack("ok", last={"state": "succeeded"}, conditions=READY)
    failing = stack("failing", last={"state": "failed", "failures": 1}, conditions=RETRYING)
    stalled = stack("stalled", last={"state": "failed", "failures": 3}, conditions=STALLED)
    paused = stack("paused", spec={"suspend": True}, last={"state": "failed", "failures": 3}, conditions=STALLED)
    plan = {s.metadata.name: what for s, what in view.retry_plan([ok, failing, stalled, paused])}
    assert plan["ok"].startswith("skipped")
    assert plan["failing"] == plan["stalled"] == "retry requested"
    assert plan["paused"].startswith("retry requested; the Stack is suspended")
    assert all(w.startswith("retry") for _, w in view.retry_plan([ok], force=True))
    assert view.annotation_patch("x") == {"metadata": {"annotations": {"pulumi.com/reconciliation-request": "x"}}}


def test_describe_names_conditions_updates_events_and_the_pod() -> None:
    s = stack(last={"state": "failed", "failures": 1, "name": "app-1", "type": "up", "message": "boom"},
              conditions=RETRYING)
    update = {"metadata": {"name": "app-1", "creationTimestamp": T0}, "spec": {"type": "up"},
              "status": {"message": "boom", "conditions": [cond("Complete", "True", "Updated"),
                                                           cond("Failed", "True", "UpdateFailed")]}}
    event = {"type": "Warning", "reason": "StackUpdateFailure", "message": "Failed to update Stack",
             "lastTimestamp": T0, "count": 2}
    workspace = {"metadata": {"name": "app"}, "status": {"address": "app-workspace.ns:50051",
                                                          "conditions": [cond("Ready", "True", "Succeeded")]}}
    pod = {"metadata": {"name": "app-workspace-0"},
           "status": {"phase": "Running", "containerStatuses": [
               {"name": "pulumi", "ready": True, "restartCount": 1, "state": {"running": {}}}]}}
    text = view.describe(s, [update], [event], workspace, pod, NOW)
    assert "State:            Reconciling (RetryingAfterFailure)" in text
    assert "Next retry:       2026-09-01T11:59:30Z (due)" in text
    assert "RetryingAfterFailure" in text
    assert "app-1   up     Failed" in text
    assert "Warning   StackUpdateFailure   60s   2" in text
    assert "app-workspace-0 Running" in text
    assert "running, ready=True, restarts=1" in text
    bare = view.describe(stack(), [], [], None, None, NOW)
    assert bare.count("<none>") == 6


def test_a_sleeping_workspace_shows_in_get() -> None:
    """pko's scale-to-zero: the Stack stays Ready; `get` says its workspace sleeps, `-o wide` and json name the
    Workspace's state."""
    def workspace(*found: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": "app"}, "status": {"conditions": list(found)}}

    assert view.workspace_state(None) == "-"
    assert view.workspace_state(workspace()) == "Pending"
    assert view.workspace_state(workspace(cond("Ready", "True", "Succeeded"))) == "Ready"
    assert view.workspace_state(workspace(cond("Ready", "True", "Sleeping"))) == "Sleeping"
    assert view.workspace_state(workspace(cond("Ready", "False", "Waking"))) == "Waking"
    asleep = view.row_of(stack("asleep", last={"state": "succeeded", "type": "up"}, conditions=READY), "Sleeping")
    awake = view.row_of(stack("awake", last={"state": "succeeded", "type": "up"}, conditions=READY), "Ready")
    lines = [[c.strip() for c in line.split("   ") if c.strip()]
             for line in view.table([asleep, awake], NOW).splitlines()]
    assert lines[0] == ["NAME", "STATE", "LAST UPDATE", "FAILURES", "NEXT RETRY", "SUSPENDED"]
    assert lines[1][:2] == ["asleep", "Ready (sleeping)"]
    assert lines[2][:2] == ["awake", "Ready"]
    wide = view.table([asleep, awake], NOW, wide=True).splitlines()
    assert wide[0].split()[-5:] == ["WORKSPACE", "UPDATE", "COMMIT", "REASON", "MESSAGE"]
    assert json.loads(view.dump([asleep], "json"))["items"][0]["workspace"] == "Sleeping"
    assert json.loads(view.dump([asleep], "json"))["items"][0]["state"] == "Ready"


def test_logs_are_read_from_just_before_the_update_was_created() -> None:
    now = datetime.datetime(2026, 11, 22, 12, 0, 0, tzinfo=datetime.UTC)
    update = {"metadata": {"name": "s-1", "creationTimestamp": "2026-11-22T11:58:00Z"}}
    assert view.log_since(update, now) == 122
    assert view.log_since({"metadata": {"creationTimestamp": "2026-11-22T12:00:00Z"}}, now) == 2
    assert view.log_since({"metadata": {"creationTimestamp": "garbage"}}, now) is None
    assert view.log_since({"metadata": {}}, now) is None
    assert view.log_since(None, now) is None
