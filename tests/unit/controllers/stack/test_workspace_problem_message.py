"""A stuck Workspace's problem reaches the Stack's Reconciling message; plain waiting keeps the reference's text."""

from __future__ import annotations

from pko.api import conditions
from pko.api.meta import Condition
from pko.controllers.stack import sync

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
