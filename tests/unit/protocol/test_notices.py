"""The agent's notices in an operation's stream (pko.protocol.notices): a released stale lock is a warning
diagnostic the operator recognises, and nothing else is taken for one."""

from __future__ import annotations

import datetime

from pko.controllers.stack import sync
from pko.protocol import notices


def test_a_stale_lock_notice_round_trips() -> None:
    event = notices.stale_lock_released("a1b2.json", 4242, "stack-workspace-0",
                                        datetime.datetime(2026, 11, 27, tzinfo=datetime.UTC))
    assert event["diagnosticEvent"]["severity"] == "warning"
    assert notices.stale_lock_notice(event) == (
        "pko: released the stale stack lock a1b2.json: its holder, pid 4242 on stack-workspace-0, is gone")


def test_other_events_are_no_notices() -> None:
    assert notices.stale_lock_notice({"diagnosticEvent": {"message": "error: the stack is locked"}}) is None
    assert notices.stale_lock_notice({"resourcePreEvent": {"metadata": {}}}) is None
    assert notices.stale_lock_notice({"diagnosticEvent": "not a mapping"}) is None


def test_only_the_notice_lines_reach_a_successful_stacks_status() -> None:
    notice = "pko: released the stale stack lock x.json: its holder, pid 1 on h, is gone"
    assert sync.stale_lock_lines(f"{notice}\nupdate failed: something else") == notice
    assert sync.stale_lock_lines("update succeeded") is None
    assert sync.stale_lock_lines(None) is None
