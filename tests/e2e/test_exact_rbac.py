"""The quickstart's RBAC is exactly enough: the operator runs with nothing but the permissions deploy/quickstart
grants its service account, and a workspace service account gets nothing it was not given.

The quickstart's Namespace, ServiceAccounts, Roles, ClusterRoles and bindings (not the Deployment: there is no
kubelet) go onto a control plane of this module's own: the shared one carries the test harness's extra grant to the
same service account and other tests' Stacks, which a cluster-wide operator would pick up. The operator runs
in-process with a kubeconfig holding a token of `pulumi-kubernetes-operator/controller-manager` (TokenRequest).

Its `local` workspace agents stand in for workspace pods. In a pod the agent reviews the operator's token with the
pod's own service account; here the agents get a kubeconfig with a token of `default/pulumi`, the workspace service
account the quickstart binds to `system:auth-delegator`, so that grant is proven too.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import lightkube
import pytest
import yaml
from lightkube.models.authorization_v1 import ResourceAttributes, SubjectAccessReviewSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.authorization_v1 import SubjectAccessReview
from lightkube.resources.core_v1 import Secret

from pko.kube import client as kclient
from pko.kube import resources, tokens
from pko.testing import binaries, controlplane, operator, waiting

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "deploy" / "quickstart" / "install.yaml"
OPERATOR_NS = "pulumi-kubernetes-operator"
OPERATOR_SA = "controller-manager"
WORKSPACE_NS = "default"
WORKSPACE_SA = "pulumi"
RBAC_KINDS = {"Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
PASSPHRASE = {"type": "Literal", "literal": {"value": "rbac-passphrase"}}


def quickstart() -> list[dict[str, Any]]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [d for d in yaml.load_all(QUICKSTART.read_text(), Loader=loader) if d]


def kubectl(cp: controlplane.ControlPlane, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run([str(binaries.require("kubectl")), "--kubeconfig", str(cp.kubeconfig), *args],
                          input=stdin, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"kubectl {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def wait_established(cp: controlplane.ControlPlane, attempts: int = 60) -> None:
    """`kubectl wait` for every CRD, again while one has no status yet (kubectl fails on a CRD whose conditions
    are not written, instead of waiting: the larger Stack CRD with CEL rules takes a moment)."""
    for _ in range(attempts):
        done = subprocess.run([str(binaries.require("kubectl")), "--kubeconfig", str(cp.kubeconfig), "wait",
                               "--for=condition=Established", "--timeout=60s", "crd", "--all"],
                              capture_output=True, text=True, timeout=120)
        if done.returncode == 0:
            return
        time.sleep(1)
    raise AssertionError(f"CRDs not Established:\n{done.stdout}\n{done.stderr}")


def write_kubeconfig(path: Path, cp: controlplane.ControlPlane, user: str, token: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "pko",
        "clusters": [{"name": "pko", "cluster": {"server": cp.server, "certificate-authority": str(cp.ca_file)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "pko", "context": {"cluster": "pko", "user": user, "namespace": "default"}}],
    }))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def rbac_plane(testbed_dir: Path) -> Iterator[controlplane.ControlPlane]:
    try:
        cp = controlplane.start(testbed_dir / "cluster-rbac")
    except Exception as err:  # a broken test bed fails the tests, never skips them
        pytest.fail(f"could not start the control plane: {err}", pytrace=False)
    with cp:
        # The CRDs and the quickstart's identities and permissions, nothing else.
        docs = [d for d in quickstart() if d["kind"] in RBAC_KINDS | {"CustomResourceDefinition"}]
        kubectl(cp, "apply", "--server-side", "--field-manager=quickstart", "-f", "-",
                stdin=yaml.safe_dump_all(docs))
        wait_established(cp)
        yield cp


@pytest.fixture(scope="module")
async def admin(rbac_plane: controlplane.ControlPlane) -> AsyncIterator[kclient.Client]:
    async with kclient.Client.connect(lightkube.KubeConfig.from_file(str(rbac_plane.kubeconfig))) as client:
        yield client


async def kubeconfig_for(admin: kclient.Client, cp: controlplane.ControlPlane, namespace: str, name: str,
                         path: Path) -> Path:
    token = await tokens.request(admin, namespace, name, [controlplane.SERVICE_ACCOUNT_ISSUER], 3600)
    return write_kubeconfig(path, cp, f"{namespace}-{name}", token.value)


async def allowed(admin: kclient.Client, user: str, verb: str, resource: str, *, group: str = "",
                  namespace: str | None = None, name: str | None = None) -> bool:
    kind, _, subresource = resource.partition("/")
    review = SubjectAccessReview(metadata=ObjectMeta(), spec=SubjectAccessReviewSpec(
        user=user, resourceAttributes=ResourceAttributes(group=group, resource=kind, subresource=subresource or None,
                                                         verb=verb, namespace=namespace, name=name)))
    result = await admin.api.create(review)
    return bool(result.status and result.status.allowed)


def ready(obj: dict[str, Any] | None) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NS}:{OPERATOR_SA}"
WORKSPACE_USER = f"system:serviceaccount:{WORKSPACE_NS}:{WORKSPACE_SA}"


async def test_quickstart_objects_are_accepted_by_the_api_server(rbac_plane: controlplane.ControlPlane) -> None:
    """Everything else in the quickstart (Deployment, Service, NetworkPolicy) passes server-side validation."""
    rest = [d for d in quickstart() if d["kind"] not in RBAC_KINDS | {"CustomResourceDefinition"}]
    assert sorted(d["kind"] for d in rest) == ["Deployment", "NetworkPolicy", "Service"]
    out = kubectl(rbac_plane, "apply", "--server-side", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(rest))
    assert "deployment.apps/controller-manager serverside-applied (server dry run)" in out


async def test_operator_service_account_permissions_are_the_references(admin: kclient.Client) -> None:
    """Spot checks of the granted and the withheld, as the API server's authorizer answers them."""
    grants = [
        ("watch", "stacks", "pulumi.com", None, None),
        ("update", "stacks/finalizers", "pulumi.com", "team", None),
        ("patch", "workspaces/status", "auto.pulumi.com", "team", None),
        ("use", "workspaces/rpc", "auto.pulumi.com", "team", "ws"),
        ("create", "statefulsets", "apps", "team", None),
        ("create", "secrets", "", "team", None),
        # pko's spec.outputs (docs/outputs.md): the Secret and ConfigMap a Stack owns are created and updated.
        ("update", "secrets", "", "team", None),
        ("create", "configmaps", "", "team", None),
        ("update", "configmaps", "", "team", None),
        ("list", "gitrepositories", "source.toolkit.fluxcd.io", None, None),
        ("create", "serviceaccounts/token", "", OPERATOR_NS, OPERATOR_SA),
        ("update", "leases", "coordination.k8s.io", OPERATOR_NS, "operator.pulumi.com"),
    ]
    for verb, resource, group, namespace, name in grants:
        assert await allowed(admin, OPERATOR_USER, verb, resource, group=group, namespace=namespace, name=name), \
            (verb, resource, namespace, name)
    denials = [
        ("delete", "secrets", "", "team", None),
        ("patch", "secrets", "", "team", None),
        ("delete", "configmaps", "", "team", None),
        ("patch", "configmaps", "", "team", None),
        ("create", "serviceaccounts/token", "", OPERATOR_NS, "other"),
        ("create", "serviceaccounts/token", "", "team", OPERATOR_SA),
        ("update", "leases", "coordination.k8s.io", "team", "operator.pulumi.com"),
        ("list", "nodes", "", None, None),
        ("create", "clusterroles", "rbac.authorization.k8s.io", None, None),
        ("delete", "customresourcedefinitions", "apiextensions.k8s.io", None, None),
    ]
    for verb, resource, group, namespace, name in denials:
        assert not await allowed(admin, OPERATOR_USER, verb, resource, group=group, namespace=namespace, name=name), \
            (verb, resource, namespace, name)


async def test_workspace_service_account_cannot_read_secrets(
    admin: kclient.Client, rbac_plane: controlplane.ControlPlane, tmp_path: Path,
) -> None:
    """`default/pulumi` may review tokens (system:auth-delegator) and nothing more: its own namespace's Secrets
    stay closed to it (a real request with its token answers 403)."""
    await admin.apply(resources.SECRET.new("db-password", WORKSPACE_NS, stringData={"password": "hunter2"}),
                      field_manager="rbac-test")
    config = await kubeconfig_for(admin, rbac_plane, WORKSPACE_NS, WORKSPACE_SA, tmp_path / "workspace.kubeconfig")
    async with kclient.Client.connect(lightkube.KubeConfig.from_file(str(config))) as client:
        with pytest.raises(lightkube.ApiError) as denied:
            await client.api.get(Secret, "db-password", namespace=WORKSPACE_NS)
        assert denied.value.status.code == 403
        with pytest.raises(lightkube.ApiError) as denied:
            async for _ in client.api.list(Secret, namespace=WORKSPACE_NS):
                pass
        assert denied.value.status.code == 403
        # What it was granted works: reviewing a SubjectAccess (as the agent does for the operator's token).
        assert await allowed(client, OPERATOR_USER, "use", "workspaces/rpc", group="auto.pulumi.com",
                             namespace=WORKSPACE_NS, name="ws")
    assert not await allowed(admin, WORKSPACE_USER, "get", "secrets", namespace=WORKSPACE_NS)
    assert not await allowed(admin, WORKSPACE_USER, "get", "stacks", group="pulumi.com", namespace=WORKSPACE_NS)
    assert await allowed(admin, WORKSPACE_USER, "create", "tokenreviews", group="authentication.k8s.io")
    # The namespace's default service account (the Workspace default) has nothing at all.
    assert not await allowed(admin, f"system:serviceaccount:{WORKSPACE_NS}:default", "get", "secrets",
                             namespace=WORKSPACE_NS)


async def test_operator_runs_a_stack_with_only_the_quickstart_permissions(
    admin: kclient.Client, rbac_plane: controlplane.ControlPlane, tmp_path: Path, pulumi_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    caplog.set_level(logging.INFO)
    operator_config = await kubeconfig_for(admin, rbac_plane, OPERATOR_NS, OPERATOR_SA, tmp_path / "op.kubeconfig")
    agent_config = await kubeconfig_for(admin, rbac_plane, WORKSPACE_NS, WORKSPACE_SA, tmp_path / "ws.kubeconfig")

    # The agents review the operator's tokens as default/pulumi (bound to system:auth-delegator).
    op = operator.Operator(operator_config, tmp_path / "workspaces", agent_kubeconfig=agent_config)
    await op.start()
    try:
        backend = tmp_path / "state"
        backend.mkdir()
        await admin.create(resources.PROGRAM.new("rbac", WORKSPACE_NS, program={
            "outputs": {"greeting": "hello with exact RBAC", "token": {"fn::secret": "s3cr3t"}}}))
        await admin.create(resources.STACK.new("rbac", WORKSPACE_NS, spec={
            "stack": "dev", "programRef": {"name": "rbac"}, "backend": f"file://{backend}",
            "envRefs": {"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE}, "destroyOnFinalize": True,
            "workspaceTemplate": {"spec": {"serviceAccountName": WORKSPACE_SA}},
            # pko's spec.outputs: the quickstart's role lets the operator write the Secret and ConfigMap.
            "outputs": {"secretName": "rbac-outputs", "configMapName": "rbac-outputs"},
        }))
        stack = await waiting.wait_for(admin, resources.STACK, "rbac", WORKSPACE_NS, ready, timeout=240)
        assert stack is not None
        assert stack["status"]["outputs"] == {"greeting": "hello with exact RBAC", "token": "[secret]"}
        assert stack["status"]["lastUpdate"]["state"] == "succeeded"
        published = waiting.condition(stack, "OutputsPublished")
        assert (published.get("status"), published.get("reason")) == ("True", "Published"), published
        secret = await admin.get(resources.SECRET, "rbac-outputs", WORKSPACE_NS)
        assert sorted(secret["data"]) == ["greeting", "token"]
        config_map = await admin.get(resources.CONFIG_MAP, "rbac-outputs", WORKSPACE_NS)
        assert config_map["data"] == {"greeting": "hello with exact RBAC"}
        # The next update rewrites both (update, not only create).
        first = stack["status"]["lastUpdate"]["name"]
        await admin.patch(resources.STACK, "rbac", {"metadata": {"annotations": {
            "pulumi.com/reconciliation-request": "again"}}}, WORKSPACE_NS)
        stack = await waiting.wait_for(admin, resources.STACK, "rbac", WORKSPACE_NS, lambda o: ready(o) and (
            o["status"]["lastUpdate"]["name"] != first), timeout=240)
        published = waiting.condition(stack, "OutputsPublished")
        assert (published.get("status"), published.get("reason")) == ("True", "Published"), published
        for kind in (resources.SECRET, resources.CONFIG_MAP):
            rewritten = await admin.get(kind, "rbac-outputs", WORKSPACE_NS)
            assert rewritten["metadata"]["annotations"]["pulumi.com/update-name"] == stack["status"]["lastUpdate"][
                "name"]

        await admin.delete(resources.STACK, "rbac", WORKSPACE_NS)
        await waiting.wait_gone(admin, resources.STACK, "rbac", WORKSPACE_NS, timeout=240)
        updates = (await admin.list(resources.UPDATE, namespace=WORKSPACE_NS)).items
        destroys = [u for u in updates if u["spec"]["type"] == "destroy"]
        assert destroys, [u["spec"]["type"] for u in updates]
        assert all(any(c["type"] == "Complete" and c["status"] == "True" for c in u["status"]["conditions"])
                   for u in destroys)
    finally:
        await op.stop()
    forbidden = [r.getMessage() for r in caplog.records if "forbidden" in r.getMessage().lower()
                 or " 403" in r.getMessage()]
    assert not forbidden, "the operator was refused something:\n" + "\n".join(forbidden[:10])

