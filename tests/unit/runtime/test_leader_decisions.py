"""Leader election decisions: given the lease record, when we saw it, and now — acquire, renew or wait."""

from __future__ import annotations

import datetime

import pytest

from pko.runtime import leaderelection as le

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def held_by(holder: str, duration: float = 60.0, transitions: int = 0) -> le.Record:
    return le.Record(holder, duration, T0, T0, transitions)


def test_no_lease_or_released_lease_is_acquired_at_once() -> None:
    assert le.decide(None, "me", observed_at=0, now=0) is le.Action.ACQUIRE
    assert le.decide(held_by(""), "me", observed_at=0, now=0) is le.Action.ACQUIRE


def test_own_lease_is_renewed() -> None:
    assert le.decide(held_by("me"), "me", observed_at=0, now=1000) is le.Action.RENEW


def test_foreign_lease_is_waited_for_until_it_expires_on_our_clock() -> None:
    record = held_by("other", duration=60)
    assert le.decide(record, "me", observed_at=100, now=159.9) is le.Action.WAIT
    assert le.decide(record, "me", observed_at=100, now=160) is le.Action.ACQUIRE


def test_observation_time_moves_only_when_the_record_changes() -> None:
    first = held_by("other")
    renewed = le.Record("other", 60, T0, T0 + datetime.timedelta(seconds=10))
    assert le.observed(None, 0, first, now=5) == 5
    assert le.observed(first, 5, first, now=50) == 5
    assert le.observed(first, 5, renewed, now=50) == 50


def test_record_timestamps_from_another_clock_do_not_matter() -> None:
    # The holder's clock is an hour behind: its renewTime looks ancient, but we saw it change just now.
    skewed = le.Record("other", 60, T0 - datetime.timedelta(hours=1), T0 - datetime.timedelta(hours=1))
    assert le.decide(skewed, "me", observed_at=1000, now=1001) is le.Action.WAIT


def test_acquire_counts_transitions_and_renew_keeps_acquire_time() -> None:
    now = T0 + datetime.timedelta(seconds=5)
    taken = le.next_record(held_by("other", transitions=2), "me", le.Action.ACQUIRE, 60, now)
    assert (taken.holder, taken.transitions, taken.acquire_time, taken.renew_time) == ("me", 3, now, now)
    later = now + datetime.timedelta(seconds=10)
    renewed = le.next_record(taken, "me", le.Action.RENEW, 60, later)
    assert (renewed.acquire_time, renewed.renew_time, renewed.transitions) == (now, later, 3)
    assert le.next_record(None, "me", le.Action.ACQUIRE, 60, now).transitions == 0
    with pytest.raises(ValueError, match="nothing to write"):
        le.next_record(taken, "me", le.Action.WAIT, 60, now)


def test_release_clears_the_holder_and_keeps_transitions() -> None:
    released = le.released(held_by("me", transitions=4), T0)
    assert (released.holder, released.lease_duration, released.transitions) == ("", 1.0, 4)


def test_leadership_is_lost_at_the_renew_deadline() -> None:
    timing = le.Timing(lease_duration=60, renew_deadline=45, retry_period=10)
    assert not le.lost(last_renewed=100, now=144.9, timing=timing)
    assert le.lost(last_renewed=100, now=145, timing=timing)


def test_timing_must_leave_room_for_the_successor() -> None:
    with pytest.raises(ValueError, match="renew deadline"):
        le.Timing(lease_duration=10, renew_deadline=10, retry_period=1)
    with pytest.raises(ValueError, match="retry period"):
        le.Timing(lease_duration=10, renew_deadline=5, retry_period=5)


def test_lease_spec_round_trip() -> None:
    record = le.Record("me", 15, T0, T0 + datetime.timedelta(microseconds=123456), 2)
    spec = le.lease_spec(record)
    assert spec == {"holderIdentity": "me", "leaseDurationSeconds": 15, "leaseTransitions": 2,
                    "acquireTime": "2026-01-01T00:00:00.000000Z", "renewTime": "2026-01-01T00:00:00.123456Z"}
    assert le.record_of({"spec": spec}) == record
    assert le.record_of({}) == le.Record()
