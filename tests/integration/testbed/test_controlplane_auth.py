"""The test bed's API server is a real one: objects persist, and service-account tokens work end to end.

The agent's kube auth mode (TokenRequest → TokenReview → SubjectAccessReview) depends on exactly this.
"""

from __future__ import annotations

import uuid

from lightkube import AsyncClient
from lightkube.models.authentication_v1 import TokenRequestSpec, TokenReviewSpec
from lightkube.models.authorization_v1 import ResourceAttributes, SubjectAccessReviewSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.authorization_v1 import SubjectAccessReview
from lightkube.resources.core_v1 import ConfigMap, Namespace, ServiceAccount


async def test_objects_persist_and_service_account_tokens_authenticate(kube: AsyncClient) -> None:
    ns = f"testbed-{uuid.uuid4().hex[:6]}"
    await kube.create(Namespace(metadata=ObjectMeta(name=ns)))
    await kube.create(ConfigMap(metadata=ObjectMeta(name="settings", namespace=ns), data={"greeting": "hello"}))
    await kube.create(ServiceAccount(metadata=ObjectMeta(name="robot", namespace=ns)))

    stored = await kube.get(ConfigMap, "settings", namespace=ns)
    assert stored.data == {"greeting": "hello"}

    audience = f"robot.{ns}"
    token_request = ServiceAccount.Token(
        metadata=ObjectMeta(name="robot", namespace=ns),
        spec=TokenRequestSpec(audiences=[audience], expirationSeconds=600),
    )
    issued = await kube.create(token_request, name="robot", namespace=ns)
    assert issued.status is not None
    assert issued.status.token

    review = await kube.create(TokenReview(spec=TokenReviewSpec(token=issued.status.token, audiences=[audience])))
    assert review.status is not None
    assert review.status.authenticated is True, review.status.error
    assert review.status.user is not None
    assert review.status.user.username == f"system:serviceaccount:{ns}:robot"
    assert review.status.audiences == [audience]

    wrong_audience = await kube.create(
        TokenReview(spec=TokenReviewSpec(token=issued.status.token, audiences=["someone-else"]))
    )
    assert wrong_audience.status is not None
    assert not wrong_audience.status.authenticated

    access = await kube.create(
        SubjectAccessReview(
            spec=SubjectAccessReviewSpec(
                user=review.status.user.username,
                groups=review.status.user.groups,
                resourceAttributes=ResourceAttributes(
                    namespace=ns, name="ws", group="auto.pulumi.com", version="v1alpha1",
                    resource="workspaces", subresource="rpc", verb="use",
                ),
            )
        )
    )
    assert access.status is not None
    # RBAC answers: a fresh service account has no grant for the workspace RPC.
    assert access.status.allowed is False

    await kube.delete(Namespace, ns)
