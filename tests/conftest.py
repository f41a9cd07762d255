"""Session fixtures shared by every tier: the real control plane, a lightkube client, a Pulumi environment.

The control plane starts once per test session (lazily, only when a test asks for it) and its logs are printed
when a test that used it fails. Missing binaries fail the tests loudly: run `make tools`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from lightkube import AsyncClient, KubeConfig

from pko.testing import controlplane, pulumi


@pytest.fixture(scope="session")
def testbed_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pko-testbed-"))
    yield path
    if not os.environ.get("PKO_KEEP_TESTBED"):
        shutil.rmtree(path, ignore_errors=True)


def _start(testbed_dir: Path, name: str, controller_manager: bool) -> Iterator[controlplane.ControlPlane]:
    try:
        cp = controlplane.start(testbed_dir / name, controller_manager=controller_manager)
    except Exception as err:  # a broken test bed must fail the tests, never skip them
        pytest.fail(f"could not start the control plane: {err}", pytrace=False)
    with cp:
        yield cp


@pytest.fixture(scope="session")
def control_plane(testbed_dir: Path) -> Iterator[controlplane.ControlPlane]:
    """etcd + kube-apiserver, shared by the whole session."""
    yield from _start(testbed_dir, "cluster", controller_manager=False)


@pytest.fixture(scope="session")
def control_plane_with_kcm(testbed_dir: Path) -> Iterator[controlplane.ControlPlane]:
    """A separate control plane that also runs kube-controller-manager (garbage collection, StatefulSet → Pod)."""
    yield from _start(testbed_dir, "cluster-kcm", controller_manager=True)


@pytest.fixture(scope="session")
def kubeconfig(control_plane: controlplane.ControlPlane) -> KubeConfig:
    return KubeConfig.from_file(str(control_plane.kubeconfig))


@pytest.fixture
async def kube(kubeconfig: KubeConfig) -> AsyncIterator[AsyncClient]:
    """An admin lightkube client on the session control plane."""
    client = AsyncClient(config=kubeconfig)
    yield client
    await client.close()


@pytest.fixture
def pulumi_env(tmp_path: Path) -> dict[str, str]:
    """Environment for the real Pulumi CLI: built binaries, file backend, passphrase secrets."""
    return pulumi.pulumi_env(tmp_path)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when == "call":
        for name in ("control_plane", "control_plane_with_kcm"):
            cp = item.funcargs.get(name) if hasattr(item, "funcargs") else None
            if isinstance(cp, controlplane.ControlPlane):
                report.sections.append((f"{name} logs", cp.logs()))
