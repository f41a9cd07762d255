"""The expiring cache the agent's authorisation and the dependency cache's refusals share: an entry lives until its
expiry, putting it again renews it as the newest, and the oldest goes first when full."""

from __future__ import annotations

from pko.expiring import TTLCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_entry_lives_until_its_expiry_and_is_then_forgotten() -> None:
    clock = Clock()
    cache: TTLCache[str] = TTLCache(clock=clock)
    assert cache.get("a") is None
    cache.put("a", "too big", 60)
    clock.now += 59.9
    assert (cache.get("a"), cache.get("b")) == ("too big", None)
    clock.now += 0.1
    assert cache.get("a") is None
    assert cache._entries == {}  # forgotten, not kept as expired


def test_putting_again_renews_and_the_oldest_go_first_past_the_size() -> None:
    clock = Clock()
    cache: TTLCache[str] = TTLCache(size=2, clock=clock)
    cache.put("a", "1", 60)
    clock.now += 30
    cache.put("b", "2", 60)
    cache.put("a", "1 again", 60)  # renewed: now the newest
    cache.put("c", "3", 60)  # "b" is the oldest now
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == ("1 again", None, "3")
    clock.now += 59
    assert cache.get("a") == "1 again"
