"""Fixtures of the cluster tier: a real single-node Kubernetes cluster (`pko.testing.cluster`) with the images
`make images` built, pko installed into it with its Helm chart, and a git server that pods reach.

The cluster lives for this package only (the tiers after it need no kubelet, and a node costs memory and CPU).
Its teardown asserts that nothing of it is left on the machine. Tests here run in file order: `test_00_*` checks
teardown before the shared cluster exists, `test_90_*` upgrades and uninstalls the shared operator last.
"""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightkube
import pytest

from pko.kube import client as kclient
from pko.kube import errors, resources
from pko.testing import binaries, cluster, gitserver, images

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "pko"
OPERATOR_NAMESPACE = "pko-system"
RELEASE = "pko"
#: The chart is installed with a numeric tag on purpose: `--set image.tag=1` once rendered `:%!s(int64=1)`.
OPERATOR_TAG = "1"
WORKSPACE_IMAGE = "docker.io/pulumi/pulumi:3.259.0-nonroot"
PASSPHRASE = "pko-cluster-passphrase"
WORKSPACE_SERVICE_ACCOUNT = "pulumi"


@pytest.fixture(scope="package")
def built_images() -> dict[str, images.BuiltImage]:
    try:
        return images.build()
    except images.ImageError as err:
        pytest.fail(f"the test images could not be built: {err}", pytrace=False)


@pytest.fixture(scope="package")
def real_cluster(tmp_path_factory: pytest.TempPathFactory,
                 built_images: dict[str, images.BuiltImage]) -> Iterator[cluster.Cluster]:
    workdir = tmp_path_factory.mktemp("real-cluster")
    try:
        running = cluster.start(workdir, images=built_images.values())
    except Exception as err:  # a broken test bed fails the tests, never skips them
        pytest.fail(f"could not start the real cluster: {err}", pytrace=False)
    pko_ref = built_images["pko"].refs[0]
    running.tag_image(pko_ref, f"docker.io/pko/pko:{OPERATOR_TAG}")
    yield running
    running.stop()
    left = cluster.leftovers(workdir, running.net)
    assert not left, f"the cluster left things behind: {left}"


@pytest.fixture
async def ckc(real_cluster: cluster.Cluster) -> AsyncIterator[kclient.Client]:
    """An admin client of the real cluster."""
    async with kclient.Client.connect(lightkube.KubeConfig.from_file(str(real_cluster.kubeconfig))) as client:
        yield client


def helm(real_cluster: cluster.Cluster, *args: str, check: bool = True,
         timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(binaries.require("helm")), f"--kubeconfig={real_cluster.kubeconfig}", *args],
                          capture_output=True, text=True, timeout=timeout, check=False)
    if check:
        assert done.returncode == 0, f"helm {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done


@dataclass
class Release:
    name: str
    namespace: str
    installed: bool = True


def diagnose(real_cluster: cluster.Cluster, namespace: str) -> str:
    """What a failing test prints: the namespace's pods, events and the logs of its containers."""
    parts = [real_cluster.kubectl("get", "pods,statefulsets,services", "-n", namespace, "-o", "wide",
                                  check=False).stdout,
             real_cluster.kubectl("get", "events", "-n", namespace, "--sort-by=.lastTimestamp",
                                  check=False).stdout[-4000:]]
    pods = (real_cluster.api_get(f"/api/v1/namespaces/{namespace}/pods") or {}).get("items", [])
    for pod in pods[:6]:
        name = pod["metadata"]["name"]
        statuses = pod["status"].get("initContainerStatuses", []) + pod["status"].get("containerStatuses", [])
        for status in statuses:
            for previous in ("false", "true") if status.get("restartCount") else ("false",):
                logs = real_cluster.kubectl("logs", "-n", namespace, name, "-c", status["name"],
                                            f"--previous={previous}", "--tail=40", check=False)
                parts.append(f"--- logs of {name}/{status['name']} (previous={previous})\n"
                             f"{(logs.stdout + logs.stderr)[-3000:]}")
    return "\n".join(parts)


@pytest.fixture(scope="package")
def operator_release(real_cluster: cluster.Cluster) -> Iterator[Release]:
    """pko installed from its chart into the cluster, with the image built from the Dockerfile."""
    done = helm(real_cluster, "install", RELEASE, str(CHART), "--namespace", OPERATOR_NAMESPACE,
                "--create-namespace", "--set", f"image.tag={OPERATOR_TAG}", "--set", "image.pullPolicy=IfNotPresent",
                "--set", "leaderElection.leaseDuration=15s", "--set", "leaderElection.renewDeadline=10s",
                "--set", "leaderElection.retryPeriod=2s",
                "--wait", "--timeout", "240s", check=False)
    assert done.returncode == 0, f"helm install failed:\n{done.stderr}\n{diagnose(real_cluster, OPERATOR_NAMESPACE)}"
    release = Release(RELEASE, OPERATOR_NAMESPACE)
    yield release
    if release.installed:
        helm(real_cluster, "uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, "--wait", check=False)


@pytest.fixture
async def cnamespace(ckc: kclient.Client, real_cluster: cluster.Cluster) -> AsyncIterator[str]:
    """A fresh namespace of the real cluster; its Stacks are deleted (and destroyed) before it goes."""
    name = f"cl-{uuid.uuid4().hex[:8]}"
    await ckc.create(resources.NAMESPACE.new(name))
    # what a user does for every namespace with Stacks (the chart's `workspaces.serviceAccounts` does the same):
    # the workspace pods' account may review the operator's tokens
    await ckc.create({"apiVersion": "v1", "kind": "ServiceAccount",
                      "metadata": {"name": WORKSPACE_SERVICE_ACCOUNT, "namespace": name}})
    real_cluster.kubectl("create", "clusterrolebinding", f"{name}:{WORKSPACE_SERVICE_ACCOUNT}:system:auth-delegator",
                         "--clusterrole=system:auth-delegator",
                         f"--serviceaccount={name}:{WORKSPACE_SERVICE_ACCOUNT}")
    yield name
    for stack in (await ckc.list(resources.STACK, name)).items:
        with contextlib.suppress(errors.NotFound):
            await ckc.delete(resources.STACK, stack["metadata"]["name"], name)
    real_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="package")
def pod_git(tmp_path_factory: pytest.TempPathFactory, real_cluster: cluster.Cluster) -> Iterator[gitserver.GitServer]:
    """The test git server, listening at the node's address so that workspace pods reach it."""
    with gitserver.running(tmp_path_factory.mktemp("pod-git"), host=real_cluster.node_ip) as server:
        yield server


def workspace_template(**extra: Any) -> dict[str, Any]:
    """A Stack's `workspaceTemplate` that runs the local stand-in of Pulumi's nonroot image, never pulling, as the
    namespace's workspace account, with a small CPU request so that several workspaces fit on the 2-core node."""
    spec: dict[str, Any] = {
        "image": WORKSPACE_IMAGE, "imagePullPolicy": "IfNotPresent", "serviceAccountName": WORKSPACE_SERVICE_ACCOUNT,
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
        **extra,
    }
    return {"spec": spec}


def passphrase_env() -> dict[str, Any]:
    return {"PULUMI_CONFIG_PASSPHRASE": {"type": "Literal", "literal": {"value": PASSPHRASE}}}
