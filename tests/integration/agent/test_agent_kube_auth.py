"""`--auth-mode kube` against the real API server: service-account tokens are checked by TokenReview (audience
`<workspace>.<namespace>`) and must be allowed to `use` `workspaces/rpc` by a SubjectAccessReview."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from agent_testlib import AgentFactory, copy_program, drive
from lightkube import AsyncClient
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import PolicyRule, RoleRef, Subject
from lightkube.resources.core_v1 import Namespace, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import Role, RoleBinding

from pko.kube import client as kclient
from pko.kube import errors, tokens
from pko.protocol.proto import agent_pb2
from pko.testing.controlplane import ControlPlane

pytestmark = [pytest.mark.pulumi, pytest.mark.controlplane]

WORKSPACE = "my-stack"


@pytest.fixture
async def namespace(kube: AsyncClient) -> AsyncIterator[str]:
    name = f"agent-auth-{uuid.uuid4().hex[:6]}"
    await kube.create(Namespace(metadata=ObjectMeta(name=name)))
    for account in ("operator", "stranger", "no-delegator"):
        await kube.create(ServiceAccount(metadata=ObjectMeta(name=account, namespace=name)))
    await kube.create(Role(metadata=ObjectMeta(name="workspace-rpc", namespace=name), rules=[
        PolicyRule(apiGroups=["auto.pulumi.com"], resources=["workspaces/rpc"], verbs=["use"],
                   resourceNames=[WORKSPACE])]))
    await kube.create(RoleBinding(
        metadata=ObjectMeta(name="operator-workspace-rpc", namespace=name),
        roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="Role", name="workspace-rpc"),
        subjects=[Subject(kind="ServiceAccount", name="operator", namespace=name)]))
    yield name
    await kube.delete(Namespace, name)


async def token(kube: AsyncClient, namespace: str, account: str, audience: str | None) -> str:
    request = ServiceAccount.Token(metadata=ObjectMeta(name=account, namespace=namespace),
                                   spec=TokenRequestSpec(audiences=[audience] if audience else [],
                                                         expirationSeconds=3600))
    issued = await kube.create(request, name=account, namespace=namespace)
    assert issued.status is not None
    return str(issued.status.token)


def bearer(value: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {value}"),)


async def test_kube_auth_modes(tmp_path: Path, start_agent: AgentFactory, kube: AsyncClient,
                               control_plane: ControlPlane, namespace: str) -> None:
    audience = f"{WORKSPACE}.{namespace}"
    agent = await start_agent(
        copy_program("config-yaml", tmp_path / "ws"), "--auth-mode", "kube", "--kube-audience", audience,
        "--kube-workspace-namespace", namespace, "--kube-workspace-name", WORKSPACE,
        "--kubeconfig", str(control_plane.kubeconfig))
    stub = agent.stub
    version = agent_pb2.PulumiVersionRequest()

    async def refused(metadata: tuple[tuple[str, str], ...] = ()) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await stub.PulumiVersion(version, metadata=metadata)
        return failure.value.code(), failure.value.details() or ""

    assert await refused() == (grpc.StatusCode.UNAUTHENTICATED, "Request unauthenticated with Bearer")
    assert (await refused(bearer("not-a-token")))[0] == grpc.StatusCode.UNAUTHENTICATED
    wrong_audience = await token(kube, namespace, "operator", "someone-else")
    assert (await refused(bearer(wrong_audience)))[0] == grpc.StatusCode.UNAUTHENTICATED
    stranger = await token(kube, namespace, "stranger", audience)
    code, _ = await refused(bearer(stranger))
    assert code == grpc.StatusCode.PERMISSION_DENIED

    operator = await token(kube, namespace, "operator", audience)
    answer = await stub.PulumiVersion(version, metadata=bearer(operator))
    assert answer.version == "3.259.0"
    # the token the operator itself mints (pko.kube.tokens, through its own transport) is accepted too
    async with kclient.Client.from_kubeconfig(control_plane.kubeconfig) as client:
        minted = await tokens.request(client, namespace, "operator", [audience], expiration_seconds=600)
        with pytest.raises(errors.NotFound):
            await tokens.request(client, namespace, "nobody", [audience])
    left = minted.expires - datetime.datetime.now(datetime.UTC)
    assert datetime.timedelta(seconds=500) < left <= datetime.timedelta(seconds=600)
    assert (await stub.PulumiVersion(version, metadata=bearer(minted.value))).version == "3.259.0"
    await stub.SelectStack(agent_pb2.SelectStackRequest(stack_name="dev", create=True), metadata=bearer(operator))
    denied_stream = await drive(stub.Preview(agent_pb2.PreviewRequest(), metadata=bearer(stranger)))
    assert denied_stream.error is not None
    assert denied_stream.error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert not denied_stream.events
    stream = await drive(stub.Preview(agent_pb2.PreviewRequest(), metadata=bearer(operator)))
    assert stream.error is not None  # the YAML program needs config, so the preview fails...
    assert stream.error.code() == grpc.StatusCode.UNKNOWN  # ...but only after auth let it through
    assert "missing configuration values" in (stream.error.details() or "")
    assert operator not in agent.log()


async def test_agent_without_review_permissions(tmp_path: Path, start_agent: AgentFactory, kube: AsyncClient,
                                                control_plane: ControlPlane, namespace: str) -> None:
    own_token = await token(kube, namespace, "no-delegator", None)
    kubeconfig = tmp_path / "agent.kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: c\n  cluster:\n    server: {control_plane.server}\n"
        f"    certificate-authority: {control_plane.ca_file}\n"
        f"users:\n- name: u\n  user:\n    token: {own_token}\n"
        "contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n")
    audience = f"{WORKSPACE}.{namespace}"
    agent = await start_agent(
        copy_program("config-yaml", tmp_path / "ws"), "--auth-mode", "kube", "--kube-audience", audience,
        "--kube-workspace-namespace", namespace, "--kube-workspace-name", WORKSPACE, "--kubeconfig", str(kubeconfig))
    operator = await token(kube, namespace, "operator", audience)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await agent.stub.PulumiVersion(agent_pb2.PulumiVersionRequest(), metadata=bearer(operator))
    assert (failure.value.code(), failure.value.details()) == (grpc.StatusCode.UNAUTHENTICATED,
                                                               "TokenReview API is unavailable")
    assert "system:auth-delegator" in agent.log()


async def test_kube_mode_requires_its_flags(tmp_path: Path, start_agent: AgentFactory) -> None:
    with pytest.raises(pytest.fail.Exception, match="--kube-audience is required"):
        await start_agent(copy_program("config-yaml", tmp_path / "ws"), "--auth-mode", "kube")


def _minted(control_plane: ControlPlane, issued: str, *, expires_in: int) -> str:
    """A copy of the real token `issued` (same issuer, subject, audience, key id and service-account claims), signed
    with the control plane's own service-account key, that expires `expires_in` seconds from now (negative: it
    already has). Why not a TokenRequest: the API server will not issue a token shorter-lived than 10 minutes."""
    import time

    import jwt

    header = jwt.get_unverified_header(issued)
    claims = jwt.decode(issued, options={"verify_signature": False})
    now = int(time.time())
    claims.update(iat=now - 7200, nbf=now - 7200, exp=now + expires_in)
    key = (control_plane.workdir / "pki" / "sa.key").read_text()
    return jwt.encode(claims, key, algorithm=header.get("alg", "RS256"), headers={"kid": header.get("kid", "")})


async def test_expired_token_is_refused(tmp_path: Path, start_agent: AgentFactory, kube: AsyncClient,
                                        control_plane: ControlPlane, namespace: str) -> None:
    """A token that would be allowed in every other respect is refused once expired; the same token re-signed
    with a future expiry is accepted, so the refusal is about the expiry and nothing else."""
    audience = f"{WORKSPACE}.{namespace}"
    agent = await start_agent(
        copy_program("config-yaml", tmp_path / "ws"), "--auth-mode", "kube", "--kube-audience", audience,
        "--kube-workspace-namespace", namespace, "--kube-workspace-name", WORKSPACE,
        "--kubeconfig", str(control_plane.kubeconfig))
    issued = await token(kube, namespace, "operator", audience)
    version = agent_pb2.PulumiVersionRequest()

    still_valid = _minted(control_plane, issued, expires_in=3600)
    assert (await agent.stub.PulumiVersion(version, metadata=bearer(still_valid))).version

    expired = _minted(control_plane, issued, expires_in=-60)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await agent.stub.PulumiVersion(version, metadata=bearer(expired))
    assert failure.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert expired not in agent.log()
