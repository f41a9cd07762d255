"""The recorder's correlator: an event told again adds to one Event's count, and repeats are limited per object."""

from __future__ import annotations

from pko.kube import events


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_event_told_again_counts_on_the_one_posted() -> None:
    correlator = events.Correlator()
    parts = ("workspace-controller", "v1alpha1", "Workspace", "ns", "w", "uid", "Warning", "ConnectionFailure")
    key = events.digest(*parts, "m")
    assert correlator.repeat(key) is None  # new: posted as an Event of its own
    correlator.posted(key, events._Told("w.1", "ns", 1, "2026-12-07T12:00:00Z"))
    first, second = correlator.repeat(key), correlator.repeat(key)
    assert first is second
    assert second is not None
    assert (second.name, second.count) == ("w.1", 3)
    assert correlator.repeat(events.digest(*parts, "another message")) is None
    correlator.forget(key)
    assert correlator.repeat(key) is None


def test_repeats_are_limited_to_a_burst_then_one_every_refill() -> None:
    clock = _Clock()
    correlator = events.Correlator(clock, burst=3, refill=300.0)
    source = events.digest("workspace-controller", "v1alpha1", "Workspace", "ns", "w", "uid", "ConnectionFailure")
    assert [correlator.allow(source) for _ in range(4)] == [True, True, True, False]
    assert correlator.allow(events.digest("workspace-controller", "v1alpha1", "Workspace", "ns", "w", "uid",
                                          "UpdateFailed"))  # another reason: its own
    clock.now = 299.0
    assert not correlator.allow(source)
    clock.now = 300.5  # one token a refill
    assert correlator.allow(source)
    assert not correlator.allow(source)
    clock.now = 100_000.0  # no more than the burst however long the wait
    assert [correlator.allow(source) for _ in range(4)] == [True, True, True, False]


def test_what_is_remembered_is_bounded() -> None:
    correlator = events.Correlator(remembered=2)
    keys = [events.digest("c", i) for i in range(3)]
    for i, key in enumerate(keys):
        correlator.posted(key, events._Told(f"e{i}", "ns", 1, ""))
    assert correlator.repeat(keys[0]) is None  # the least recently used went
    assert correlator.repeat(keys[2]) is not None
