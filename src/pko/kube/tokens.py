"""Short-lived, audience-bound service-account tokens (TokenRequest), as the operator presents to workspace agents.

The agent authenticates every RPC with TokenReview for the audience `<workspace>.<namespace>`, so a token minted
for one workspace is useless against another. Never log the token.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import lightkube
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ServiceAccount

from pko.kube import client as kclient
from pko.kube import errors


@dataclass(frozen=True)
class Token:
    value: str
    expires: datetime.datetime

    def __repr__(self) -> str:  # keep the secret out of logs and tracebacks
        return f"Token(expires={self.expires.isoformat()})"


async def request(client: kclient.Client, namespace: str, service_account: str, audiences: list[str],
                  expiration_seconds: int = 3600) -> Token:
    """A token for `namespace/service_account`, valid for `audiences`."""
    body = ServiceAccount.Token(
        metadata=ObjectMeta(name=service_account, namespace=namespace),
        spec=TokenRequestSpec(audiences=audiences, expirationSeconds=expiration_seconds),
    )
    try:
        issued = await client.api.create(body, name=service_account, namespace=namespace)
    except lightkube.ApiError as err:
        raise errors.translate(err) from err
    status = issued.status
    if status is None or not status.token:
        raise errors.ApiError(500, "InternalError", f"TokenRequest for {namespace}/{service_account} returned no token")
    expires = status.expirationTimestamp or (
        datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=expiration_seconds)
    )
    return Token(status.token, expires)
