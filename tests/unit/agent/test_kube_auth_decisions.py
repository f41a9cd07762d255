"""Kube auth decisions and caching: bearer parsing, audiences, the reference's TTLs and status codes.

The reviewers here are plain functions that answer like the API server would; the real TokenReview and
SubjectAccessReview round trip is covered by tests/integration/agent.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import pytest

from pko.agent import auth
from pko.agent.errors import AgentError

ALICE = auth.Identity("alice", "uid-1", ("devs",))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Reviewers:
    def __init__(self) -> None:
        self.tokens: dict[str, auth.TokenReviewOutcome | Exception] = {}
        self.allowed: dict[str, auth.AccessOutcome | Exception] = {}
        self.token_calls = 0
        self.access_calls = 0

    async def review_token(self, token: str, audiences: Sequence[str]) -> auth.TokenReviewOutcome:
        self.token_calls += 1
        outcome = self.tokens.get(token, auth.TokenReviewOutcome(False))
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def review_access(self, identity: auth.Identity, namespace: str, name: str) -> auth.AccessOutcome:
        self.access_calls += 1
        assert (namespace, name) == ("ns", "ws")
        outcome = self.allowed.get(identity.username, auth.AccessOutcome(False))
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


@pytest.fixture
def setup() -> tuple[auth.KubeAuth, Reviewers, Clock]:
    reviewers, clock = Reviewers(), Clock()
    kube = auth.KubeAuth(reviewers.review_token, reviewers.review_access, ("ws.ns",), "ns", "ws", clock=clock)
    return kube, reviewers, clock


def md(token: str) -> list[tuple[str, str | bytes]]:
    return [("authorization", f"Bearer {token}")]


async def refused(kube: auth.KubeAuth, metadata: list[tuple[str, str | bytes]]) -> AgentError:
    with pytest.raises(AgentError) as failure:
        await kube.check(metadata)
    return failure.value


def test_bearer_token_parsing() -> None:
    assert auth.bearer_token([("authorization", "Bearer abc")]) == "abc"
    assert auth.bearer_token([("authorization", b"bearer abc")]) == "abc"
    for metadata, message in (([], "Request unauthenticated with Bearer"),
                              ([("authorization", "Basic abc")], "Request unauthenticated with Bearer"),
                              ([("authorization", "Bearer")], "Bad authorization string")):
        with pytest.raises(AgentError) as failure:
            auth.bearer_token(metadata)
        assert (failure.value.rpc.code, failure.value.rpc.message) == (grpc.StatusCode.UNAUTHENTICATED, message)


async def test_allowed_identity_is_cached_five_minutes(setup: tuple[auth.KubeAuth, Reviewers, Clock]) -> None:
    kube, reviewers, clock = setup
    reviewers.tokens["t"] = auth.TokenReviewOutcome(True, ALICE, ("ws.ns",))
    reviewers.allowed["alice"] = auth.AccessOutcome(True)
    assert await kube.check(md("t")) == ALICE
    clock.now += 299
    assert await kube.check(md("t")) == ALICE
    assert (reviewers.token_calls, reviewers.access_calls) == (1, 1)
    clock.now += 2
    await kube.check(md("t"))
    assert (reviewers.token_calls, reviewers.access_calls) == (1, 2)  # token still cached (1 h)
    clock.now += 3600
    await kube.check(md("t"))
    assert reviewers.token_calls == 2


async def test_denied_is_permission_denied_and_cached_five_seconds(
        setup: tuple[auth.KubeAuth, Reviewers, Clock]) -> None:
    kube, reviewers, clock = setup
    reviewers.tokens["t"] = auth.TokenReviewOutcome(True, ALICE, ("ws.ns",))
    err = await refused(kube, md("t"))
    assert (err.rpc.code, err.rpc.message) == (grpc.StatusCode.PERMISSION_DENIED, "forbidden")
    reviewers.allowed["alice"] = auth.AccessOutcome(True)
    await refused(kube, md("t"))  # the denial is still cached
    clock.now += 6
    assert await kube.check(md("t")) == ALICE


async def test_unauthenticated_tokens(setup: tuple[auth.KubeAuth, Reviewers, Clock]) -> None:
    kube, reviewers, clock = setup
    err = await refused(kube, md("bad"))
    assert (err.rpc.code, err.rpc.message) == (grpc.StatusCode.UNAUTHENTICATED, "unauthenticated")
    reviewers.tokens["bad"] = auth.TokenReviewOutcome(True, ALICE, ("ws.ns",))
    await refused(kube, md("bad"))  # failure cached for a minute
    clock.now += 61
    reviewers.allowed["alice"] = auth.AccessOutcome(True)
    assert await kube.check(md("bad")) == ALICE


async def test_wrong_audience_is_unauthenticated(setup: tuple[auth.KubeAuth, Reviewers, Clock]) -> None:
    kube, reviewers, _ = setup
    reviewers.tokens["t"] = auth.TokenReviewOutcome(True, ALICE, ("other",))
    reviewers.allowed["alice"] = auth.AccessOutcome(True)
    assert (await refused(kube, md("t"))).rpc.code == grpc.StatusCode.UNAUTHENTICATED


async def test_review_errors(setup: tuple[auth.KubeAuth, Reviewers, Clock]) -> None:
    kube, reviewers, _ = setup
    reviewers.tokens["t"] = auth.ReviewForbiddenError()
    err = await refused(kube, md("t"))
    assert (err.rpc.code, err.rpc.message) == (grpc.StatusCode.UNAUTHENTICATED, "TokenReview API is unavailable")
    reviewers.tokens["t"] = auth.TokenReviewOutcome(False, error="token expired")
    assert (await refused(kube, md("t"))).rpc.message == "token expired"
    reviewers.tokens["u"] = auth.TokenReviewOutcome(True, ALICE, ("ws.ns",))
    reviewers.allowed["alice"] = auth.ReviewForbiddenError()
    err = await refused(kube, md("u"))
    assert (err.rpc.code, err.rpc.message) == (grpc.StatusCode.UNAUTHENTICATED,
                                               "SubjectAccessReview API is unavailable")


def test_ttl_cache_evicts_oldest() -> None:
    cache: auth.TTLCache[int] = auth.TTLCache(size=2, clock=Clock())
    cache.put("a", 1, 10)
    cache.put("b", 2, 10)
    cache.put("c", 3, 10)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (None, 2, 3)
