"""Fixtures for controller tests: CRDs and the operator identity on the session control plane, a pko client,
a loopback git server, and the operator running in-process with the `local` workspace runtime."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import lightkube
import pytest

from pko.kube import client as kclient
from pko.kube import errors, resources
from pko.testing import controlplane, gitserver, operator, ports


@pytest.fixture(scope="session")
async def cluster(control_plane: controlplane.ControlPlane) -> AsyncIterator[controlplane.ControlPlane]:
    """The session control plane with our CRDs and the operator's service account installed."""
    async with kclient.Client.connect(lightkube.KubeConfig.from_file(str(control_plane.kubeconfig))) as client:
        await operator.install_crds(client)
        await operator.install_identity(client)
    return control_plane


@pytest.fixture
async def kc(cluster: controlplane.ControlPlane) -> AsyncIterator[kclient.Client]:
    async with kclient.Client.connect(lightkube.KubeConfig.from_file(str(cluster.kubeconfig))) as client:
        yield client


@pytest.fixture
async def namespace(kc: kclient.Client) -> AsyncIterator[str]:
    name = f"ctl-{uuid.uuid4().hex[:8]}"
    await kc.create(resources.NAMESPACE.new(name))
    yield name
    await _empty(kc, name)
    await kc.delete(resources.NAMESPACE, name, missing_ok=True)


async def _empty(kc: kclient.Client, namespace: str) -> None:
    """Remove the operator's objects from a finished test's namespace (finalizers and all): this control plane has
    no namespace controller, so without this they would outlive the namespace and every later cluster-wide
    operator in the session would start working on them."""
    for kind in (resources.STACK, resources.UPDATE, resources.WORKSPACE, resources.PROGRAM):
        for obj in (await kc.list(kind, namespace)).items:
            obj_name = obj["metadata"]["name"]
            with contextlib.suppress(errors.NotFound):
                if obj["metadata"].get("finalizers"):
                    await kc.patch(kind, obj_name, {"metadata": {"finalizers": None}}, namespace)
                await kc.delete(kind, obj_name, namespace, missing_ok=True)


@pytest.fixture(scope="session")
def git(tmp_path_factory: pytest.TempPathFactory) -> Iterator[gitserver.GitServer]:
    with gitserver.running(tmp_path_factory.mktemp("git")) as server:
        yield server


@pytest.fixture
async def running_operator(cluster: controlplane.ControlPlane, tmp_path: Path, pulumi_env: dict[str, str],
                           monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[operator.Operator]:
    """The operator in this process; its local agents inherit the Pulumi test environment."""
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    async with operator.running(cluster.kubeconfig, tmp_path / "workspaces") as op:
        yield op


@pytest.fixture
async def stack_operator(cluster: controlplane.ControlPlane, namespace: str, tmp_path: Path,
                         pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
                         ) -> AsyncIterator[operator.Operator]:
    """The operator in this process, watching only the test's namespace, with `/metrics` on a loopback port
    (`op.metrics_address`)."""
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    address = f"127.0.0.1:{ports.free_port()}"
    async with operator.running(cluster.kubeconfig, tmp_path / "workspaces", namespace=namespace,
                                metrics_address=address) as op:
        yield op
