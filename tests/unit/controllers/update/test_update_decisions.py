"""`plan.decide`: what the Update controller does with an Update it is handed (pko-v2 §3.3 steps 1-2)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from pko.api import update as up_api
from pko.controllers.update import plan

NOW = datetime.datetime(2025, 3, 1, 12, 0, 0, tzinfo=datetime.UTC)


def _condition(type_: str, status: str, at: datetime.datetime = NOW, reason: str = "Any") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": "",
            "lastTransitionTime": at.strftime("%Y-%m-%dT%H:%M:%SZ")}


def _update(conditions: list[dict[str, Any]] | None = None, ttl: str | None = None,
            kind: str = "up") -> up_api.Update:
    spec: dict[str, Any] = {"workspaceName": "ws", "stackName": "dev", "type": kind}
    if ttl is not None:
        spec["ttlAfterCompleted"] = ttl
    body: dict[str, Any] = {"metadata": {"name": "u", "namespace": "ns", "generation": 1}, "spec": spec}
    if conditions is not None:
        body["status"] = {"conditions": conditions}
    return up_api.Update.model_validate(body)


def _decide(update: up_api.Update, *, running: bool = False, deleting: bool = False, has_controller: bool = True,
            now: datetime.datetime = NOW) -> plan.Decision:
    return plan.decide(update, running=running, deleting=deleting, has_controller=has_controller, now=now)


COMPLETE = [_condition("Progressing", "False"), _condition("Failed", "False"), _condition("Complete", "True")]


def test_complete_without_ttl_is_left_alone() -> None:
    assert _decide(_update(COMPLETE)) == plan.Decision(plan.Action.IGNORE)


@pytest.mark.parametrize("flags", [{"running": True}, {"deleting": True}, {"has_controller": False}])
def test_complete_without_ttl_wins_over_every_other_state(flags: dict[str, bool]) -> None:
    assert _decide(_update(COMPLETE), **flags).action is plan.Action.IGNORE


def test_complete_with_ttl_not_reached_waits_for_the_remaining_time() -> None:
    done_at = NOW - datetime.timedelta(seconds=20)
    update = _update([_condition("Complete", "True", at=done_at)], ttl="1m")
    decision = _decide(update)
    assert decision.action is plan.Action.WAIT_TTL
    assert decision.requeue_after == pytest.approx(40.0)


def test_ttl_is_counted_from_the_complete_condition_transition() -> None:
    # Progressing moved later than Complete: only Complete's lastTransitionTime counts.
    update = _update([_condition("Progressing", "False", at=NOW), _condition("Complete", "True",
                                                                            at=NOW - datetime.timedelta(hours=1))],
                     ttl="90m")
    decision = _decide(update)
    assert decision.action is plan.Action.WAIT_TTL
    assert decision.requeue_after == pytest.approx(30 * 60.0)


@pytest.mark.parametrize("elapsed", [5.0, 5.5, 3600.0])
def test_complete_past_its_ttl_expires(elapsed: float) -> None:
    update = _update([_condition("Complete", "True", at=NOW - datetime.timedelta(seconds=elapsed))], ttl="5s")
    assert _decide(update) == plan.Decision(plan.Action.EXPIRE)


def test_ttl_of_zero_expires_at_once() -> None:
    assert _decide(_update([_condition("Complete", "True")], ttl="0s")).action is plan.Action.EXPIRE


def test_complete_false_is_not_complete() -> None:
    update = _update([_condition("Complete", "False")], ttl="5s")
    assert _decide(update).action is plan.Action.START


def test_running_update_is_not_re_entered() -> None:
    progressing = [_condition("Progressing", "True"), _condition("Complete", "False")]
    assert _decide(_update(progressing), running=True) == plan.Decision(plan.Action.IGNORE)
    # ...not even when it is being deleted meanwhile: the operation in flight records its own end.
    assert _decide(_update(progressing), running=True, deleting=True).action is plan.Action.IGNORE


STARTED = NOW - datetime.timedelta(minutes=3)
INTERRUPTED = [_condition("Progressing", "True", at=STARTED), _condition("Failed", "False"),
               _condition("Complete", "False")]


@pytest.mark.parametrize("kind", ["preview", "refresh", "destroy"])
def test_progressing_with_no_operation_of_ours_was_aborted(kind: str) -> None:
    assert _decide(_update(INTERRUPTED, kind=kind)) == plan.Decision(plan.Action.ABORT)
    # Aborted wins over Canceled, as in the reference (it checks Progressing first).
    assert _decide(_update(INTERRUPTED, kind=kind), deleting=True, has_controller=False).action is plan.Action.ABORT


def test_an_interrupted_up_is_resumed_from_when_it_started() -> None:
    assert _decide(_update(INTERRUPTED)) == plan.Decision(plan.Action.RESUME, resume_after=STARTED)


@pytest.mark.parametrize("flags", [{"deleting": True}, {"has_controller": False}])
def test_an_interrupted_up_being_deleted_or_orphaned_is_aborted(flags: dict[str, bool]) -> None:
    assert _decide(_update(INTERRUPTED), **flags).action is plan.Action.ABORT


def test_being_deleted_cancels() -> None:
    assert _decide(_update(), deleting=True) == plan.Decision(plan.Action.CANCEL)


def test_no_controller_owner_cancels() -> None:
    assert _decide(_update(), has_controller=False) == plan.Decision(plan.Action.CANCEL)
    waiting = [_condition("Progressing", "False", reason="WorkspaceNotReady")]
    assert _decide(_update(waiting), has_controller=False).action is plan.Action.CANCEL


@pytest.mark.parametrize("conditions", [
    None,
    [],
    [_condition("Progressing", "False", reason="WorkspaceNotFound"), _condition("Complete", "False")],
    [_condition("Progressing", "Unknown")],
])
def test_otherwise_the_operation_starts(conditions: list[dict[str, Any]] | None) -> None:
    assert _decide(_update(conditions)) == plan.Decision(plan.Action.START)


def test_ttl_on_an_update_that_has_not_completed_is_irrelevant() -> None:
    assert _decide(_update(None, ttl="1s")).action is plan.Action.START
