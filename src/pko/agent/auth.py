"""``--auth-mode kube``: who may call the agent, decided by the Kubernetes API server, as in the reference agent.

Each call carries ``authorization: Bearer <token>``. The token is checked with a TokenReview for the agent's
audiences (``--kube-audience``); the identity must then be allowed, by a SubjectAccessReview, to ``use`` the
``workspaces/rpc`` subresource (group ``auto.pulumi.com``) of this agent's Workspace. Answers are cached like the
reference's: token reviews 1 h when valid and 1 min when not, access decisions 5 min when allowed and 5 s when
denied; API errors are never cached. Status codes: ``UNAUTHENTICATED`` for a missing or bad token (or when the
agent's service account may not create reviews: "TokenReview API is unavailable"), ``PERMISSION_DENIED`` when the
identity is not allowed.

It must never log or store a token (the cache is keyed by its SHA-256).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from pko.agent import apiserver
from pko.agent.errors import AgentError
from pko.expiring import TTLCache

log = logging.getLogger("pko.agent.auth")

TOKEN_OK_TTL = 3600.0
TOKEN_FAIL_TTL = 60.0
ACCESS_ALLOW_TTL = 300.0
ACCESS_DENY_TTL = 5.0

API_GROUP = "auto.pulumi.com"
API_VERSION = "v1alpha1"
RESOURCE = "workspaces"
SUBRESOURCE = "rpc"
VERB = "use"

SERVICE_ACCOUNT_HINT = """
The stack's service account needs permission to access the Kubernetes API.
Please add a ClusterRoleBinding for the ClusterRole 'system:auth-delegator'.
For example:

\tapiVersion: rbac.authorization.k8s.io/v1
\tkind: ClusterRoleBinding
\tmetadata:
\t  name: {ns}:{sa}:system:auth-delegator
\troleRef:
\t  apiGroup: rbac.authorization.k8s.io
\t  kind: ClusterRole
\t  name: system:auth-delegator
\tsubjects:
\t  - kind: ServiceAccount
\t    namespace: {ns}
\t    name: {sa}
"""


class ReviewForbiddenError(Exception):
    """The API server refused the review itself (HTTP 403): the agent's identity may not create reviews."""


class ReviewError(Exception):
    """The API server failed a review; the message is its ``Status`` message."""


@dataclass(frozen=True)
class Identity:
    """The identity behind a token, as a TokenReview reports it."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class TokenReviewOutcome:
    """A TokenReview's answer (``status``); ``identity`` is None when the review names nobody."""

    authenticated: bool
    identity: Identity | None = None
    audiences: tuple[str, ...] = ()
    error: str = ""


def _section(parent: dict[str, Any], key: str) -> dict[str, Any]:
    found = parent.get(key)
    return found if isinstance(found, dict) else {}


def token_review_outcome(answer: dict[str, Any]) -> TokenReviewOutcome:
    """A TokenReview as the API server returned it (JSON), read leniently: what is missing counts as absent."""
    status = _section(answer, "status")
    user = _section(status, "user")
    who = None
    if user.get("username"):
        extra = tuple(sorted((str(k), tuple(str(x) for x in v or ())) for k, v in (user.get("extra") or {}).items()))
        who = Identity(str(user["username"]), str(user.get("uid") or ""),
                       tuple(str(g) for g in user.get("groups") or ()), extra)
    return TokenReviewOutcome(bool(status.get("authenticated")), who,
                              tuple(str(a) for a in status.get("audiences") or ()), str(status.get("error") or ""))


def token_review(token: str, audiences: Sequence[str]) -> dict[str, Any]:
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token, "audiences": list(audiences)}}


def access_review(identity: Identity, namespace: str, name: str) -> dict[str, Any]:
    """The SubjectAccessReview of `identity` using this agent's Workspace's `workspaces/rpc`."""
    spec: dict[str, Any] = {"user": identity.username, "groups": list(identity.groups), "resourceAttributes": {
        "namespace": namespace, "name": name, "group": API_GROUP, "version": API_VERSION, "resource": RESOURCE,
        "subresource": SUBRESOURCE, "verb": VERB}}
    if identity.uid:
        spec["uid"] = identity.uid
    if identity.extra:
        spec["extra"] = {k: list(v) for k, v in identity.extra}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


@dataclass(frozen=True)
class AccessOutcome:
    allowed: bool
    reason: str = ""


TokenReviewer = Callable[[str, Sequence[str]], Awaitable[TokenReviewOutcome]]
AccessReviewer = Callable[[Identity, str, str], Awaitable[AccessOutcome]]


def bearer_token(metadata: Iterable[tuple[str, str | bytes]] | None) -> str:
    """The bearer token of a call, or ``UNAUTHENTICATED`` with the reference's messages."""
    value = ""
    for key, item in metadata or ():
        if key.lower() == "authorization":
            value = item.decode() if isinstance(item, bytes) else item
            break
    if not value:
        raise AgentError(grpc.StatusCode.UNAUTHENTICATED, "Request unauthenticated with Bearer")
    scheme, _, token = value.partition(" ")
    if not token:
        raise AgentError(grpc.StatusCode.UNAUTHENTICATED, "Bad authorization string")
    if scheme.lower() != "bearer":
        raise AgentError(grpc.StatusCode.UNAUTHENTICATED, "Request unauthenticated with Bearer")
    return token


def _hint() -> str:
    return SERVICE_ACCOUNT_HINT.format(ns=os.environ.get("POD_NAMESPACE", ""), sa=os.environ.get("POD_SA_NAME", ""))


@dataclass
class KubeAuth:
    """Authenticates and authorizes calls for one Workspace (``namespace``/``name``)."""

    review_token: TokenReviewer
    review_access: AccessReviewer
    audiences: tuple[str, ...]
    namespace: str
    name: str
    clock: Callable[[], float] = time.monotonic
    _tokens: TTLCache[TokenReviewOutcome] = field(init=False)
    _access: TTLCache[AccessOutcome] = field(init=False)

    def __post_init__(self) -> None:
        self._tokens = TTLCache(clock=self.clock)
        self._access = TTLCache(clock=self.clock)

    async def authenticate(self, token: str) -> Identity:
        key = (hashlib.sha256(token.encode()).hexdigest(), self.audiences)
        outcome = self._tokens.get(key)
        if outcome is None:
            try:
                outcome = await self.review_token(token, self.audiences)
            except ReviewForbiddenError:
                log.error(_hint())
                raise AgentError(grpc.StatusCode.UNAUTHENTICATED, "TokenReview API is unavailable") from None
            except Exception as err:
                log.warning("authentication failed with an error: %s", err)
                raise AgentError(grpc.StatusCode.UNAUTHENTICATED, str(err)) from None
            if outcome.authenticated or not outcome.error:
                self._tokens.put(key, outcome, TOKEN_OK_TTL if _valid(outcome, self.audiences) else TOKEN_FAIL_TTL)
        if outcome.error and not outcome.authenticated:
            log.warning("authentication failed: %s", outcome.error)
            raise AgentError(grpc.StatusCode.UNAUTHENTICATED, outcome.error)
        if not _valid(outcome, self.audiences) or outcome.identity is None:
            log.warning("authentication failed (unauthenticated)")
            raise AgentError(grpc.StatusCode.UNAUTHENTICATED, "unauthenticated")
        return outcome.identity

    async def authorize(self, identity: Identity) -> None:
        key = (identity, self.namespace, self.name)
        outcome = self._access.get(key)
        if outcome is None:
            try:
                outcome = await self.review_access(identity, self.namespace, self.name)
            except ReviewForbiddenError:
                log.error(_hint())
                raise AgentError(grpc.StatusCode.UNAUTHENTICATED, "SubjectAccessReview API is unavailable") from None
            except Exception as err:
                log.error("authorization failed with an error for user %s: %s", identity.username, err)
                raise AgentError(grpc.StatusCode.UNKNOWN, str(err)) from None
            self._access.put(key, outcome, ACCESS_ALLOW_TTL if outcome.allowed else ACCESS_DENY_TTL)
        if not outcome.allowed:
            reason = outcome.reason or "forbidden"
            log.warning("access denied for user %s: %s", identity.username, reason)
            raise AgentError(grpc.StatusCode.PERMISSION_DENIED, reason)

    async def check(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> Identity:
        """Authenticate and authorize a call from its metadata; raise :class:`AgentError` to refuse it."""
        identity = await self.authenticate(bearer_token(metadata))
        await self.authorize(identity)
        return identity


def _valid(outcome: TokenReviewOutcome, wanted: Sequence[str]) -> bool:
    if not outcome.authenticated:
        return False
    return not wanted or bool(set(outcome.audiences) & set(wanted))


def kube_reviewers(server: apiserver.Endpoint) -> tuple[TokenReviewer, AccessReviewer]:
    """Token and access reviewers that ask the API server (:mod:`pko.agent.apiserver`)."""

    async def ask(path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return await apiserver.post(server, path, body)
        except apiserver.ApiError as err:
            if err.status == 403:
                raise ReviewForbiddenError() from err
            raise ReviewError(err.message) from err

    async def review_token(token: str, audiences: Sequence[str]) -> TokenReviewOutcome:
        return token_review_outcome(await ask("/apis/authentication.k8s.io/v1/tokenreviews",
                                              token_review(token, audiences)))

    async def review_access(identity: Identity, namespace: str, name: str) -> AccessOutcome:
        answer = await ask("/apis/authorization.k8s.io/v1/subjectaccessreviews",
                           access_review(identity, namespace, name))
        status = _section(answer, "status")
        allowed, denied = bool(status.get("allowed")), bool(status.get("denied"))
        if status.get("evaluationError") and not allowed:
            log.warning("access review evaluation error: %s", status["evaluationError"])
        return AccessOutcome(allowed and not denied, str(status.get("reason") or ""))

    return review_token, review_access
