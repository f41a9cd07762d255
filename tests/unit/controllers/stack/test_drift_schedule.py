"""The drift-check schedule as a pure function: interval or cron, anchored on the last check (or, before the first,
on the last successful update), delayed by a fixed per-Stack share of the jitter; and the schedules the API server
lets through that cannot run, each with a precise message."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pko.api import drift as drift_api
from pko.controllers.stack import driftschedule as sched

T0 = datetime.datetime(2026, 11, 22, 12, 0, 0, tzinfo=datetime.UTC)
UID = "5f0c5e8e-0d53-4a8b-9a43-1c1f7f3b9a01"


def _at(**delta: float) -> datetime.datetime:
    return T0 + datetime.timedelta(**delta)


def _parse(**fields: object) -> sched.Schedule:
    return sched.parse(drift_api.DriftDetection.model_validate(fields))


def test_interval_counts_from_the_last_check_or_else_the_last_update() -> None:
    every_hour = _parse(interval="1h")
    assert sched.next_check(every_hour, UID, last_check=None, anchor=T0) == _at(hours=1)
    assert sched.next_check(every_hour, UID, last_check=_at(minutes=70), anchor=T0) == _at(minutes=130)
    assert sched.wait(every_hour, UID, last_check=None, anchor=T0, now=_at(minutes=45)) == 15 * 60
    assert sched.wait(every_hour, UID, last_check=None, anchor=T0, now=_at(hours=3)) == 0  # overdue: due now


def test_cron_fires_at_its_next_time_after_the_last_check() -> None:
    daily = _parse(cron="0 3 * * *")
    assert sched.next_check(daily, UID, last_check=None, anchor=T0) == datetime.datetime(
        2026, 11, 23, 3, 0, tzinfo=datetime.UTC)
    # A check that started at its time: the next one is the following day's, not the same one again.
    started = datetime.datetime(2026, 11, 23, 3, 0, 4, tzinfo=datetime.UTC)
    assert sched.next_check(daily, UID, last_check=started, anchor=T0) == datetime.datetime(
        2026, 11, 24, 3, 0, tzinfo=datetime.UTC)
    weekdays = _parse(cron="30 6 * * MON-FRI")  # 2026-11-22 is a Sunday
    assert sched.next_check(weekdays, UID, last_check=None, anchor=T0) == datetime.datetime(
        2026, 11, 23, 6, 30, tzinfo=datetime.UTC)
    hourly = _parse(cron="@hourly")
    assert sched.next_check(hourly, UID, last_check=_at(minutes=5), anchor=T0) == _at(hours=1)


def test_the_jitter_share_is_fixed_per_stack_and_within_the_jitter() -> None:
    assert sched.offset(UID, 0) == 0.0
    share = sched.offset(UID, 600)
    assert 0 <= share < 600
    assert sched.offset(UID, 600) == share  # deterministic: every replica, every restart
    jittered = _parse(interval="1h", jitter="10m")
    assert sched.next_check(jittered, UID, last_check=None, anchor=T0) == _at(hours=1, seconds=share)
    # cron: a check starts at a time of the expression plus the share; the first one whose start is after the
    # anchor (12:00 itself, started at 12:00 + share); a delayed start maps back to its own time, so the next
    # check is the next time plus the share
    cron = _parse(cron="0 * * * *", jitter="10m")
    first = sched.next_check(cron, UID, last_check=None, anchor=T0)
    assert first == _at(seconds=share)
    assert sched.next_check(cron, UID, last_check=first + datetime.timedelta(seconds=2), anchor=T0) == _at(
        hours=1, seconds=share)


def test_a_fleet_is_spread_over_the_jitter() -> None:
    shares = [sched.offset(f"uid-{i}", 3600) for i in range(200)]
    assert len(set(shares)) == 200
    # every sixth of the hour gets some Stacks (a uniform hash; 200 draws leave no sixth empty)
    assert {int(s // 600) for s in shares} == set(range(6))


@given(uid=st.text(min_size=1, max_size=40), jitter=st.floats(min_value=0, max_value=86400))
def test_the_share_is_never_outside_the_jitter(uid: str, jitter: float) -> None:
    assert 0 <= sched.offset(uid, jitter) <= jitter


@given(minutes=st.integers(min_value=0, max_value=60 * 24 * 400))
def test_the_next_cron_check_is_always_after_the_last_one(minutes: int) -> None:
    cron = _parse(cron="*/7 1-5 * * *", jitter="90s")
    last = _at(minutes=minutes)
    following = sched.next_check(cron, UID, last_check=last, anchor=T0)
    assert following > last
    assert following - last <= datetime.timedelta(days=1, minutes=8)


@pytest.mark.parametrize(("fields", "message"), [
    ({"cron": "30-10 * * * *"},
     "spec.driftDetection.cron: '30-10 * * * *': the minute range 30-10 runs backwards; write it as two ranges: "
     "30-59,0-10"),
    ({"cron": "0 0 * * sat-mon"},
     "spec.driftDetection.cron: '0 0 * * sat-mon': the day-of-week range sat-mon runs backwards; write it as two "
     "ranges: sat-6,0-mon"),
    ({"cron": "0 0 30 2 *"}, "spec.driftDetection.cron: '0 0 30 2 *' never fires (failed to find next date)"),
    ({"cron": "0 0 31 4,6,9,11 *"},
     "spec.driftDetection.cron: '0 0 31 4,6,9,11 *' never fires (failed to find next date)"),
    ({"cron": "every day"}, f"spec.driftDetection.cron: 'every day': {drift_api.CRON_MESSAGE}"),
    ({"interval": "5s"}, "spec.driftDetection.interval: '5s' is shorter than 10s"),
    ({"interval": "-1h"}, f"spec.driftDetection.interval: '-1h' {drift_api.DURATION_MESSAGE}"),
    ({"interval": "1h", "jitter": "-1m"}, f"spec.driftDetection.jitter: '-1m' {drift_api.DURATION_MESSAGE}"),
    ({"interval": "1h", "cron": "@daily"}, "spec.driftDetection: set exactly one of interval or cron"),
    ({}, "spec.driftDetection: set exactly one of interval or cron"),
])
def test_schedules_that_cannot_run_say_exactly_why(fields: dict[str, str], message: str) -> None:
    with pytest.raises(sched.ScheduleError) as refused:
        _parse(**fields)
    assert str(refused.value) == message


@pytest.mark.parametrize("cron", ["0 */6 * * *", "@daily", "@midnight", "0 0 29 2 *", "5/15 1-3,22 * jan-mar *",
                                  "0 12 1 * 7", "59 23 31 12 SUN"])
def test_schedules_that_can_run(cron: str) -> None:
    assert _parse(cron=cron).cron == cron


def test_the_crd_and_the_controller_read_durations_and_cron_alike() -> None:
    """The CRD's CEL rules use the same expressions: what the API server accepts, the controller parses."""
    assert _parse(interval="1h30m", jitter="1.5m") == sched.Schedule(interval=5400.0, jitter=90.0)
    assert _parse(interval="10s").interval == 10.0
