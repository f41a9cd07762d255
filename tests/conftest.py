"""Fixtures shared by every tier: the real control plane, clients, a Pulumi environment, a loopback git server,
and the operator running in-process with the `local` workspace runtime.

The control plane starts once per test session (lazily, only when a test asks for it) and its logs are printed
when a test that used it fails. Missing binaries fail the tests loudly: run `make tools`.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import lightkube
import pytest
from lightkube import AsyncClient, KubeConfig

from pko.cli import logs
from pko.kube import client as kclient
from pko.kube import errors, resources
from pko.testing import controlplane, gitserver, operator, ports, pulumi, tiercost


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(tiercost.TierCostPlugin(), "pko-tier-cost")


@pytest.fixture(scope="session")
def testbed_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pko-testbed-"))
    yield path
    if not os.environ.get("PKO_KEEP_TESTBED"):
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def cli_version_cache(testbed_dir: Path) -> Iterator[Path]:
    """One `pulumi version` per CLI binary for the whole session: every local-runtime operator the tests start
    hands its agents this file (pko.agent.cliversion), as one `pko operator` hands its own agents one."""
    path = testbed_dir / "pulumi-versions.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PKO_PULUMI_VERSION_CACHE", str(path))
        yield path


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


@pytest.fixture(scope="module")
def control_plane_with_kcm(testbed_dir: Path, request: pytest.FixtureRequest) -> Iterator[controlplane.ControlPlane]:
    """A separate control plane that also runs kube-controller-manager (garbage collection, StatefulSet → Pod), for
    one module: two modules of a stream use it, and kept for the session it spent the rest of the stream's half
    hour busy with nothing (its controllers' resyncs, about as much CPU as a test)."""
    yield from _start(testbed_dir, f"cluster-kcm-{request.module.__name__.rsplit('.', 1)[-1]}", controller_manager=True)


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
    """Environment for the real Pulumi CLI: built binaries, file backend, passphrase secrets; pip installs only what
    is on this machine (``pulumi install`` of a Python project runs ``pip install --upgrade pip setuptools wheel``,
    which asks the package index every time: traffic off the machine, and a second of CPU each)."""
    return pulumi.pulumi_env(tmp_path) | {"PIP_NO_INDEX": "1"}


# --- the operator's world: CRDs, clients, namespaces, git, the operator itself ----------------------------


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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when == "call":
        for name in ("control_plane", "control_plane_with_kcm"):
            cp = item.funcargs.get(name) if hasattr(item, "funcargs") else None
            if isinstance(cp, controlplane.ControlPlane):
                report.sections.append((f"{name} logs", cp.logs()))


@pytest.fixture
def printed_logs() -> Iterator[dict[str, io.StringIO]]:
    """What the operator's two log encodings (`json`, `console`) print for the records logged during the test."""
    streams = {"json": io.StringIO(), "console": io.StringIO()}
    handlers = []
    for encoding, stream in streams.items():
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logs.formatter(json_lines=encoding == "json"))
        handlers.append(handler)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    root.handlers.extend(handlers)
    try:
        yield streams
    finally:
        for handler in handlers:
            root.removeHandler(handler)
        root.setLevel(level)
