"""TokenReview and SubjectAccessReview: ask the API server who a bearer token is, and what that identity may do.

The workspace agent authorises each call this way (``pko.agent.auth``); this module is only the two API calls,
with lightkube's typed models kept inside this layer. Failures are :mod:`pko.kube.errors` exceptions (a 403 is
:class:`~pko.kube.errors.Forbidden`: the caller may not create reviews at all).

Never log a token.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import lightkube
from lightkube.models.authentication_v1 import TokenReviewSpec
from lightkube.models.authorization_v1 import ResourceAttributes, SubjectAccessReviewSpec
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.authorization_v1 import SubjectAccessReview

from pko.kube import client as kclient
from pko.kube import errors


@dataclass(frozen=True)
class Identity:
    """The identity behind a token, as a TokenReview reports it."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class TokenReviewStatus:
    """A TokenReview's answer (``status``); ``identity`` is None when the review names nobody."""

    authenticated: bool
    identity: Identity | None = None
    audiences: tuple[str, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class Access:
    """A SubjectAccessReview's answer (``status``)."""

    allowed: bool
    denied: bool = False
    reason: str = ""
    evaluation_error: str = ""


@dataclass(frozen=True)
class ResourceRequest:
    """What a SubjectAccessReview asks about: `verb` on a (sub)resource of one named object."""

    namespace: str
    name: str
    group: str
    version: str
    resource: str
    subresource: str
    verb: str


async def review_token(client: kclient.Client, token: str, audiences: Sequence[str]) -> TokenReviewStatus | None:
    """The TokenReview of `token` for `audiences`; None when the API server returned no status."""
    try:
        review = await client.api.create(TokenReview(spec=TokenReviewSpec(token=token, audiences=list(audiences))))
    except lightkube.ApiError as err:
        raise errors.translate(err) from err
    status = review.status
    if status is None:
        return None
    user = status.user
    who = None
    if user is not None and user.username:
        extra = tuple(sorted((k, tuple(v)) for k, v in (user.extra or {}).items()))
        who = Identity(user.username, user.uid or "", tuple(user.groups or ()), extra)
    return TokenReviewStatus(bool(status.authenticated), who, tuple(status.audiences or ()), status.error or "")


async def review_access(client: kclient.Client, user: Identity, request: ResourceRequest) -> Access | None:
    """The SubjectAccessReview of `request` by `user`; None when the API server returned no status."""
    extra: Mapping[str, list[str]] = {k: list(v) for k, v in user.extra}
    spec = SubjectAccessReviewSpec(
        user=user.username, uid=user.uid or None, groups=list(user.groups), extra=dict(extra) or None,
        resourceAttributes=ResourceAttributes(
            namespace=request.namespace, name=request.name, group=request.group, version=request.version,
            resource=request.resource, subresource=request.subresource, verb=request.verb,
        ),
    )
    try:
        review = await client.api.create(SubjectAccessReview(spec=spec))
    except lightkube.ApiError as err:
        raise errors.translate(err) from err
    status = review.status
    if status is None:
        return None
    return Access(bool(status.allowed), bool(status.denied), status.reason or "", status.evaluationError or "")
