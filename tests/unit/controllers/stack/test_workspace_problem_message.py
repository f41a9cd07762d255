"""A stuck Workspace's problem reaches the Stack's Reconciling message; plain waiting keeps the reference's text;
a queued one shows its lane, not its place in the queue (which moves)."""

from __future__ import annotations

from pko.api import conditions, lanes
from pko.api.meta import Condition
from pko.controllers.stack import setup, sync
from pko.runtime import store

WAITING = conditions.MESSAGE_WAITING_FOR_WORKSPACE


def ready(status: str, reason: str, message: str) -> Condition:
    return Condition(type="Ready", status=status, reason=reason, message=message,
                     lastTransitionTime="2026-01-01T00:00:00Z")


def test_no_condition_or_plain_waiting_keeps_the_reference_text() -> None:
    assert sync.waiting_for_workspace_message(None) == WAITING
    assert sync.waiting_for_workspace_message(
        ready("False", "WaitingForReplicas", "Waiting for the workspace pod to be available")) == WAITING
    assert sync.waiting_for_workspace_message(
        ready("False", "RollingUpdate", "Waiting for the statefulset to be updated")) == WAITING


def test_a_named_problem_is_appended() -> None:
    problem = ("Waiting for the workspace agent: fetching the source failed (exit 1): unable to fetch flux artifact: "
               "failed to verify artifact: computed digest doesn't match 'sha256:00'")
    assert sync.waiting_for_workspace_message(ready("False", "WaitingForReplicas", problem)) == f"{WAITING}: {problem}"


def test_other_reasons_and_a_ready_workspace_are_not_problems() -> None:
    assert sync.waiting_for_workspace_message(ready("True", "WaitingForReplicas", "a: b")) == WAITING
    assert sync.waiting_for_workspace_message(ready("False", "Unknown", "a: b")) == WAITING


def _workspace(reason: str, message: str) -> dict[str, object]:
    return {"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace",
            "metadata": {"name": "w", "namespace": "ns"},
            "status": {"conditions": [{"type": "Ready", "status": "False", "reason": reason, "message": message,
                                       "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}


def _moved(old: dict[str, object], new: dict[str, object]) -> bool:
    return setup.workspace_changed(store.Event("MODIFIED", new, old))


def test_a_queued_stack_shows_the_lane_and_the_pool_but_not_its_place() -> None:
    message = lanes.queued_message(3, 12, 20, lanes.CHANGE)
    assert message.endswith("place in the queue: 3 of 12")
    shown = lanes.queued_summary(message)
    assert shown == ("waiting for a workspace slot (change lane): all 20 slots of --max-active-workspaces are busy; "
                     "its Workspace shows its place in the queue")
    assert lanes.queued_summary(lanes.queued_message(1, 2, 20, lanes.CHANGE)) == shown
    assert lanes.queued_summary("some other text") == "some other text"


def test_the_queue_moving_does_not_wake_the_stack_but_a_new_lane_or_leaving_the_queue_does() -> None:
    third = _workspace(conditions.QUEUED, lanes.queued_message(3, 12, 20, lanes.CHANGE))
    second = _workspace(conditions.QUEUED, lanes.queued_message(2, 11, 20, lanes.CHANGE))
    retry = _workspace(conditions.QUEUED, lanes.queued_message(2, 11, 20, lanes.RETRY))
    starting = _workspace("WaitingForReplicas", "Waiting for the workspace agent")
    assert not _moved(third, second)  # every waiting Stack's status written each time the queue moves: no
    assert _moved(second, retry)
    assert _moved(second, starting)


def _added(obj: dict[str, object]) -> bool:
    return setup.workspace_changed(store.Event("ADDED", obj, None))


def test_a_new_workspace_is_news_for_its_stack_only_when_it_says_something() -> None:
    """The Stack that applied a Workspace is reconciling already, and at the operator's start every Stack is: a
    Workspace seen for the first time with nothing to show (no status, or plain waiting) brings no reconcile; one
    that is ready, stalled, queued or stuck does (a relist can deliver any of those as ADDED)."""
    fresh: dict[str, object] = {"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace",
                                "metadata": {"name": "w", "namespace": "ns"}}
    assert not _added(fresh)
    assert not _added(_workspace("WaitingForReplicas", "Waiting for the workspace pod to be available"))
    assert _added(_workspace(conditions.QUEUED, lanes.queued_message(3, 12, 20, lanes.CHANGE)))
    assert _added(_workspace("WaitingForReplicas", "Waiting for the workspace agent: the image cannot be pulled"))
    ready_now = {**fresh, "metadata": {"name": "w", "namespace": "ns", "generation": 1},
                 "status": {"observedGeneration": 1, "conditions": [
                     {"type": "Ready", "status": "True", "reason": "Succeeded", "message": "",
                      "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
    assert _added(ready_now)
    stalled = {**fresh, "status": {"conditions": [{"type": "Stalled", "status": "True", "reason": "InstallationFailed",
                                                   "message": "x", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
    assert _added(stalled)
    assert setup.workspace_changed(store.Event("DELETED", fresh, None))
