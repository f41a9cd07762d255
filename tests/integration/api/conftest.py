"""Fixtures for the API tests: the CRDs from ``deploy/crds/`` installed on the session control plane and a fresh
namespace per test module."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from crd_testlib import CRD_DIR, kubectl
from lightkube import Client, KubeConfig
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace

from pko.api import crds
from pko.testing import controlplane


@pytest.fixture(scope="session")
def client(kubeconfig: KubeConfig) -> Iterator[Client]:
    c = Client(config=kubeconfig, field_manager="pko-api-tests")
    yield c
    c.close()


def _established(client: Client, name: str) -> bool:
    crd = client.get(CustomResourceDefinition, name)
    conditions = (crd.status.conditions or []) if crd.status else []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


@pytest.fixture(scope="session")
def installed_crds(control_plane: controlplane.ControlPlane, client: Client,
                   tmp_path_factory: pytest.TempPathFactory) -> dict[str, crds.Manifest]:
    """The committed CRD files, applied the way users do, and Established."""
    cache = tmp_path_factory.mktemp("kubectl-cache")
    applied = kubectl(control_plane, "apply", "--server-side", "--force-conflicts", "-f", str(CRD_DIR),
                      cache_dir=cache)
    assert applied.returncode == 0, applied.stderr
    manifests = crds.all_crds()
    deadline = time.monotonic() + 60
    pending = [m["metadata"]["name"] for m in manifests.values()]
    while pending and time.monotonic() < deadline:
        pending = [name for name in pending if not _established(client, name)]
        time.sleep(0.2 if pending else 0)
    assert not pending, f"CRDs not Established after 60s: {pending}"
    return manifests


@pytest.fixture(scope="module")
def namespace(client: Client, control_plane: controlplane.ControlPlane,
              installed_crds: dict[str, crds.Manifest]) -> Iterator[str]:
    """A namespace of its own for each test module (the CRDs are installed first). Its pko objects are deleted
    at the end: this control plane has no namespace controller, and an operator started by a later test would
    otherwise pick up these examples (and fetch their sources from the internet)."""
    name = f"api-{uuid.uuid4().hex[:8]}"
    client.create(Namespace(metadata={"name": name}))  # type: ignore[arg-type]
    yield name
    deleted = kubectl(control_plane, "delete", "stacks,programs,workspaces,updates", "--all", "-n", name,
                      "--wait=false")
    assert deleted.returncode == 0, deleted.stderr
    client.delete(Namespace, name)
