"""The trees refused for their size are remembered for a while, then asked again; the oldest go first."""

from __future__ import annotations

from pko.depcache import refusals


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_refusal_is_remembered_until_its_time_is_up() -> None:
    clock = Clock()
    found = refusals.Refusals(clock, remember_for=60)
    assert found.reason("npm-tree/a") is None
    found.remember("npm-tree/a", "too big")
    clock.now += 59.9
    assert found.reason("npm-tree/a") == "too big"
    assert found.reason("npm-tree/b") is None
    clock.now += 0.1
    assert found.reason("npm-tree/a") is None
    assert len(found) == 0  # forgotten, not kept as expired


def test_remembering_again_renews_and_the_oldest_go_first_past_the_bound() -> None:
    clock = Clock()
    found = refusals.Refusals(clock, remember_for=60, kept=2)
    found.remember("a", "1")
    clock.now += 30
    found.remember("b", "2")
    found.remember("a", "1 again")  # renewed: now the newest
    found.remember("c", "3")  # "b" is the oldest now
    assert (found.reason("a"), found.reason("b"), found.reason("c")) == ("1 again", None, "3")
    clock.now += 59
    assert found.reason("a") == "1 again"
