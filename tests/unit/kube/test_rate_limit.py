"""The client-side token bucket (``--kube-api-qps``/``--kube-api-burst``): a burst goes at once, then requests
are spaced at 1/qps in the order they asked; idle time refills the bucket up to the burst and no further; qps 0
never waits."""

from __future__ import annotations

import asyncio

import pytest

from pko.kube import ratelimit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_burst_then_spaced_at_the_rate() -> None:
    clock = Clock()
    bucket = ratelimit.TokenBucket(qps=2.0, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert [bucket.reserve() for _ in range(3)] == pytest.approx([0.5, 1.0, 1.5])


def test_idle_time_refills_up_to_the_burst_only() -> None:
    clock = Clock()
    bucket = ratelimit.TokenBucket(qps=10.0, burst=2, clock=clock)
    bucket.reserve(), bucket.reserve()
    assert bucket.reserve() == pytest.approx(0.1)
    clock.now += 60  # a long idle period saves up `burst` tokens, not 600
    assert [bucket.reserve() for _ in range(2)] == [0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.1)


def test_zero_qps_never_waits() -> None:
    bucket = ratelimit.TokenBucket(qps=0.0, burst=0, clock=Clock())
    assert not bucket.limited
    assert {bucket.reserve() for _ in range(1000)} == {0.0}


async def test_acquire_sleeps_for_the_reserved_delay() -> None:
    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)
        await asyncio.sleep(0)

    bucket = ratelimit.TokenBucket(qps=4.0, burst=1, clock=Clock(), sleep=sleep)
    for _ in range(3):
        await bucket.acquire()
    assert slept == pytest.approx([0.25, 0.5])
    assert bucket.waited == pytest.approx(0.75)
