"""Short-lived, audience-bound service-account tokens (TokenRequest), as the operator presents to workspace agents.

The agent authenticates every RPC with TokenReview for the audience `<workspace>.<namespace>`, so a token minted
for one workspace is useless against another. Never log the token.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import msgspec

from pko.api import conditions
from pko.kube import client as kclient
from pko.kube import errors, resources


@dataclass(frozen=True)
class Token:
    value: str
    expires: datetime.datetime

    def __repr__(self) -> str:  # keep the secret out of logs and tracebacks
        return f"Token(expires={self.expires.isoformat()})"


async def request(client: kclient.Client, namespace: str, service_account: str, audiences: list[str],
                  expiration_seconds: int = 3600) -> Token:
    """A token for `namespace/service_account`, valid for `audiences` (a TokenRequest to the ``token``
    subresource, through the client's own transport: one a new workspace, so a fleet's start sends one a Stack)."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "metadata": {"name": service_account, "namespace": namespace},
            "spec": {"audiences": audiences, "expirationSeconds": expiration_seconds}}
    path = kclient.path(resources.SERVICE_ACCOUNT, namespace, service_account, "token")
    answer = await client.http.request("POST", path, body=msgspec.json.encode(body), content_type="application/json")
    return issued(msgspec.json.decode(answer), f"{namespace}/{service_account}", expiration_seconds)


def issued(answer: object, who: str, expiration_seconds: int, now: datetime.datetime | None = None) -> Token:
    """The token in a TokenRequest's answer; its expiry, or `expiration_seconds` from `now` when it names none."""
    status = answer.get("status") if isinstance(answer, dict) else None
    token = status.get("token") if isinstance(status, dict) else None
    if not isinstance(token, str) or not token:
        raise errors.ApiError(500, "InternalError", f"TokenRequest for {who} returned no token")
    assert isinstance(status, dict)
    try:
        expires = conditions.parse_time(status.get("expirationTimestamp"))
    except (TypeError, ValueError):  # not a metav1.Time
        expires = None
    if expires is None:
        expires = (now or datetime.datetime.now(datetime.UTC)) + datetime.timedelta(seconds=expiration_seconds)
    return Token(token, expires)
