"""How long an operation may wait for its next message (pko.controllers.update.plan): the idle timeout, the hard
deadline counted from the operation's first start, and which of the two ends the wait."""

from __future__ import annotations

import datetime

from pko.api import update as up_api
from pko.controllers.update import plan

T0 = datetime.datetime(2026, 11, 27, 12, 0, tzinfo=datetime.UTC)


def test_an_updates_own_limits_win_over_the_operators() -> None:
    spec = up_api.UpdateSpec(idle_timeout="90s", timeout="2h")
    assert plan.idle_timeout(spec, 1800) == 90
    assert plan.timeout(spec, 600) == 7200
    assert plan.timeout(up_api.UpdateSpec(), 600) == 600
    assert plan.timeout(up_api.UpdateSpec(timeout="0s"), 600) == 0
    assert plan.timeout(up_api.UpdateSpec(timeout="not a duration"), 600) == 600


def test_the_deadline_counts_from_the_first_start() -> None:
    assert plan.remaining(0, T0, T0) is None
    assert plan.remaining(3600, T0, T0 + datetime.timedelta(minutes=20)) == 2400
    assert plan.remaining(3600, T0, T0 + datetime.timedelta(hours=2)) == 0


def test_the_nearer_limit_ends_the_wait() -> None:
    assert plan.wait_limit(0, None) == (None, False)  # no limit at all
    assert plan.wait_limit(1800, None) == (1800, False)
    assert plan.wait_limit(1800, 60) == (60, True)  # the deadline is nearer than a silence could be
    assert plan.wait_limit(30, 60) == (30, False)
    assert plan.wait_limit(0, 60) == (60, True)


def test_the_deadline_message_names_both_settings() -> None:
    assert plan.deadline_message("up", 3) == (
        "the up ran for longer than 3s and was cancelled (spec.timeout, or the operator's --update-timeout)")
