"""The real Flux source-controller for tests: its CRDs on a control plane, the controller run out of cluster.

`make tools` builds ``source-controller`` from its Go module and copies the module's CRDs
(``config/crd/bases/*.yaml``) to ``$PKO_BIN_DIR/flux-crds``. :func:`install_crds` applies all of them (the
controller's manager waits for every kind it reconciles, so all are needed, not just GitRepository) and waits
until they are Established; :func:`start` runs the controller against a kubeconfig with its artifact storage in a
work directory and every listener on a free loopback port. The artifact server advertises ``127.0.0.1:<port>``,
so artifact URLs work from this machine as they are (no ``SOURCE_CONTROLLER_LOCALHOST`` override needed).

It must never listen on anything but 127.0.0.1, and it fails loudly when the binary or the CRDs are missing.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pko.kube import client as kclient
from pko.testing import binaries, controlplane, operator, ports

BINARY = "source-controller"
CRD_DIR = "flux-crds"
FIELD_MANAGER = "pko-testing"


class SourceControllerError(RuntimeError):
    """source-controller could not be started; the message quotes its log."""


def crd_dir() -> Path:
    path = binaries.bin_dir() / CRD_DIR
    if not any(path.glob("*.yaml")):
        raise binaries.MissingBinaryError(
            f"the Flux CRDs are not in {path}: run `make tools` (or set PKO_BIN_DIR to where it was built)")
    return path


def crd_manifests() -> list[dict[str, Any]]:
    """The CustomResourceDefinitions shipped with the source-controller module we built."""
    manifests: list[dict[str, Any]] = []
    for path in sorted(crd_dir().glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                manifests.append(doc)
    return manifests


async def install_crds(client: kclient.Client, timeout: float = 60.0) -> list[str]:
    """Apply the Flux CRDs, wait until the API server serves them; returns their names."""
    manifests = crd_manifests()
    for manifest in manifests:
        await client.apply(manifest, field_manager=FIELD_MANAGER)
    names = [str(m["metadata"]["name"]) for m in manifests]
    await operator.wait_established(client, names, timeout)
    return names


@dataclass
class SourceController:
    """A running source-controller. Build it with :func:`start`; stop it with :meth:`stop`."""

    storage_path: Path
    storage_address: str
    health_address: str
    metrics_address: str
    _process: controlplane.Process

    @property
    def log_path(self) -> Path:
        return self._process.log_path

    @property
    def pid(self) -> int:
        return self._process.popen.pid

    def running(self) -> bool:
        return self._process.popen.poll() is None

    def logs(self, lines: int = 40) -> str:
        return self._process.tail(lines)

    def stop(self, timeout: float = 15.0) -> None:
        self._process.stop(timeout)

    def __enter__(self) -> SourceController:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(kubeconfig: Path, workdir: Path, *, watch_all_namespaces: bool = True,
          timeout: float = 60.0) -> SourceController:
    """Run source-controller against `kubeconfig`, its storage and log under `workdir`; return when it is ready.

    Ready means its health endpoint answers ``/readyz`` and its artifact server accepts connections.
    """
    workdir = workdir.resolve()
    storage = workdir / "storage"
    storage.mkdir(parents=True, exist_ok=True)
    storage_address = f"127.0.0.1:{ports.free_port()}"
    health_address = f"127.0.0.1:{ports.free_port()}"
    metrics_address = f"127.0.0.1:{ports.free_port()}"
    argv = [
        str(binaries.require(BINARY)),
        f"--storage-path={storage}",
        f"--storage-addr={storage_address}",
        f"--storage-adv-addr={storage_address}",
        f"--health-addr={health_address}",
        f"--metrics-addr={metrics_address}",
        f"--watch-all-namespaces={'true' if watch_all_namespaces else 'false'}",
        "--log-level=debug",
        "--enable-leader-election=false",
    ]
    # The kubeconfig comes from KUBECONFIG (controller-runtime's loader); RUNTIME_NAMESPACE only matters when
    # not watching all namespaces.
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "RUNTIME_NAMESPACE": "default"}
    log_dir = workdir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{BINARY}.log"
    log_file = log_path.open("ab")
    popen = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                             start_new_session=True)
    process = controlplane.Process(BINARY, popen, log_path, log_file)
    controller = SourceController(storage, storage_address, health_address, metrics_address, process)
    try:
        _wait_ready(controller, timeout)
    except BaseException:
        controller.stop()
        raise
    return controller


def _wait_ready(controller: SourceController, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    host, _, port = controller.storage_address.rpartition(":")
    while time.monotonic() < deadline:
        if not controller.running():
            raise SourceControllerError(
                f"source-controller exited with {controller._process.popen.returncode}:\n{controller.logs()}")
        try:
            with urllib.request.urlopen(f"http://{controller.health_address}/readyz", timeout=2) as response:
                healthy = response.status == 200
            if healthy:
                with socket.create_connection((host, int(port)), timeout=2):
                    return
            last = "health endpoint not ready"
        except urllib.error.HTTPError as err:
            last = f"/readyz: HTTP {err.code}"
        except OSError as err:
            last = str(err)
        time.sleep(0.2)
    raise SourceControllerError(
        f"source-controller not ready after {timeout:.0f}s ({last}):\n{controller.logs()}")


@contextlib.contextmanager
def running(kubeconfig: Path, workdir: Path, **options: Any) -> Iterator[SourceController]:
    controller = start(kubeconfig, workdir, **options)
    try:
        yield controller
    finally:
        controller.stop()
