"""Fixtures for the Program tests: our CRDs on the session control plane, a namespace per test, and the Program
controller plus its file server running in this process on a loopback port."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import lightkube
import pytest
from program_testlib import Running, running

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import controlplane, operator


@pytest.fixture(scope="session")
async def cluster(control_plane: controlplane.ControlPlane) -> controlplane.ControlPlane:
    async with kclient.Client.connect(lightkube.KubeConfig.from_file(str(control_plane.kubeconfig))) as client:
        await operator.install_crds(client)
    return control_plane


@pytest.fixture
async def kc(cluster: controlplane.ControlPlane) -> AsyncIterator[kclient.Client]:
    async with kclient.Client.connect(lightkube.KubeConfig.from_file(str(cluster.kubeconfig))) as client:
        yield client


@pytest.fixture
async def namespace(kc: kclient.Client) -> AsyncIterator[str]:
    name = f"prog-{uuid.uuid4().hex[:8]}"
    await kc.create(resources.NAMESPACE.new(name))
    yield name
    await kc.delete(resources.NAMESPACE, name, missing_ok=True)


@pytest.fixture
async def controller(kc: kclient.Client, namespace: str) -> AsyncIterator[Running]:
    async with running(kc, namespace) as r:
        yield r
