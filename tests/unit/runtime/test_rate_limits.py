"""Rate limiting math: controller-runtime's per-key exponential backoff and overall token bucket."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pko.runtime import ratelimit


def test_backoff_doubles_from_5ms_and_caps_at_1000s() -> None:
    backoff = ratelimit.Backoff()
    assert [backoff.delay(n) for n in range(4)] == [0.005, 0.01, 0.02, 0.04]
    assert backoff.delay(30) == 1000.0
    assert backoff.delay(10_000) == 1000.0


@given(st.integers(0, 200))
def test_backoff_is_monotonic_and_bounded(failures: int) -> None:
    backoff = ratelimit.Backoff()
    assert backoff.delay(failures) <= backoff.delay(failures + 1) <= backoff.cap


def test_bucket_allows_a_burst_then_paces() -> None:
    limit = ratelimit.BucketLimit(rate=10, burst=3)
    bucket = limit.full(0.0)
    waits = []
    for _ in range(5):
        bucket, wait = limit.reserve(bucket, 0.0)
        waits.append(wait)
    assert waits == [0.0, 0.0, 0.0, pytest.approx(0.1), pytest.approx(0.2)]
    bucket, wait = limit.reserve(bucket, 10.0)  # refilled, but never beyond the burst
    assert wait == 0.0
    assert bucket.tokens == 2.0


def test_limiter_counts_failures_per_key_and_forgets() -> None:
    limiter = ratelimit.RateLimiter()
    assert [limiter.when("a", 0.0) for _ in range(3)] == [0.005, 0.01, 0.02]
    assert limiter.when("b", 0.0) == 0.005
    assert limiter.retries("a") == 3
    limiter.forget("a")
    assert limiter.retries("a") == 0
    assert limiter.when("a", 0.0) == 0.005


def test_limiter_takes_the_larger_of_backoff_and_bucket() -> None:
    limiter = ratelimit.RateLimiter(bucket=ratelimit.BucketLimit(rate=1, burst=1))
    assert limiter.when("a", 0.0) == 0.005
    assert limiter.when("b", 0.0) == pytest.approx(1.0)
