"""The real-cluster test bed as pytest fixtures and helpers, shared by the cluster tier (`tests/cluster`) and the
cross-runs with the Go operator (`tests/interop`).

Why a module of its own: both tiers need the same cluster, namespaces, git server and Helm calls, and a test module
cannot import another directory's `conftest`. Each tier's conftest imports the fixtures it uses, so every package
gets its own cluster (package scope), started when its first test needs it and torn down when it ends: only one
cluster runs on a machine at a time, and the tiers after it need no kubelet.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pko.kube import client as kclient
from pko.kube import errors, resources
from pko.testing import binaries, cluster, gitserver, images, waiting

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm" / "pko"
OPERATOR_NAMESPACE = "pko-system"
RELEASE = "pko"
#: The chart is installed with a numeric tag on purpose: `--set image.tag=1` once rendered `:%!s(int64=1)`.
OPERATOR_TAG = "1"
PKO_IMAGE = f"docker.io/pko/pko:{OPERATOR_TAG}"
WORKSPACE_IMAGE = "docker.io/pulumi/pulumi:3.259.0-nonroot"
PASSPHRASE = "pko-cluster-passphrase"
WORKSPACE_SERVICE_ACCOUNT = "pulumi"
#: Fast leader election, so an operator that replaces another takes over in seconds.
FAST_ELECTION = ("leaderElection.leaseDuration=15s", "leaderElection.renewDeadline=10s",
                 "leaderElection.retryPeriod=2s")


@dataclass
class Release:
    name: str
    namespace: str
    installed: bool = True


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
    running.tag_image(built_images["pko"].refs[0], PKO_IMAGE)
    yield running
    running.stop()
    left = cluster.leftovers(workdir, running.net)
    assert not left, f"the cluster left things behind: {left}"


@pytest.fixture
async def ckc(real_cluster: cluster.Cluster) -> AsyncIterator[kclient.Client]:
    """An admin client of the real cluster."""
    async with kclient.Client.from_kubeconfig(real_cluster.kubeconfig) as client:
        yield client


def helm(real_cluster: cluster.Cluster, *args: str, check: bool = True,
         timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(binaries.require("helm")), f"--kubeconfig={real_cluster.kubeconfig}", *args],
                          capture_output=True, text=True, timeout=timeout, check=False)
    if check:
        assert done.returncode == 0, f"helm {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done


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


CA_CONFIGMAP = "git-ca"
CA_DIR = "/etc/pko-test-ca"
#: What makes pko's agent, the Go agent and both operators trust the test git server's CA (OpenSSL and Go both).
CA_ENV = {"name": "SSL_CERT_FILE", "value": f"{CA_DIR}/ca.pem"}


def ca_configmap(namespace: str, ca_pem: str) -> dict[str, Any]:
    """ConfigMap `git-ca` holding a CA (PEM) as `ca.pem`, for pods to mount at :data:`CA_DIR`."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CA_CONFIGMAP, "namespace": namespace},
            "data": {"ca.pem": ca_pem}}


def trusted_ca_values(real_cluster: cluster.Cluster, namespace: str, ca_pem: str) -> list[str]:
    """Chart values (both charts name them alike) that make an operator trust a git server's CA: ConfigMap `git-ca`
    in `namespace`, mounted at :data:`CA_DIR`, named by `SSL_CERT_FILE`. An operator lists a Stack's branch itself,
    so it needs the CA as much as the workspace pods do."""
    real_cluster.kubectl("create", "namespace", namespace, check=False)
    real_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(ca_configmap(namespace, ca_pem)))
    return [f"extraEnv[0].name={CA_ENV['name']}", f"extraEnv[0].value={CA_ENV['value']}",
            f"extraVolumes[0].name={CA_CONFIGMAP}", f"extraVolumes[0].configMap.name={CA_CONFIGMAP}",
            f"extraVolumeMounts[0].name={CA_CONFIGMAP}", f"extraVolumeMounts[0].mountPath={CA_DIR}"]


def install_pko(real_cluster: cluster.Cluster, *values: str, release: str = RELEASE,
                namespace: str = OPERATOR_NAMESPACE, git_ca: str | None = None) -> Release:
    """`helm install` of pko's chart with the image built from the Dockerfile (tag `1`) and fast leader election;
    `values` are more `--set` pairs; `git_ca` a CA (PEM) to trust for git over https."""
    sets = [f"image.tag={OPERATOR_TAG}", "image.pullPolicy=IfNotPresent", *FAST_ELECTION, *values]
    if git_ca is not None:
        sets += trusted_ca_values(real_cluster, namespace, git_ca)
    done = helm(real_cluster, "install", release, str(CHART), "--namespace", namespace, "--create-namespace",
                *(arg for pair in sets for arg in ("--set", pair)), "--wait", "--timeout", "240s", check=False)
    assert done.returncode == 0, f"helm install failed:\n{done.stderr}\n{diagnose(real_cluster, namespace)}"
    return Release(release, namespace)


def uninstall(real_cluster: cluster.Cluster, release: Release) -> None:
    if release.installed:
        helm(real_cluster, "uninstall", release.name, "--namespace", release.namespace, "--wait", check=False)
        release.installed = False


@pytest.fixture(scope="package")
def operator_release(real_cluster: cluster.Cluster) -> Iterator[Release]:
    """pko installed from its chart into the cluster, with the image built from the Dockerfile."""
    release = install_pko(real_cluster)
    yield release
    uninstall(real_cluster, release)


@pytest.fixture
async def cnamespace(ckc: kclient.Client, real_cluster: cluster.Cluster) -> AsyncIterator[str]:
    """A fresh namespace of the real cluster; its Stacks are deleted (and destroyed) before it goes."""
    name = await new_namespace(ckc, real_cluster)
    yield name
    for stack in (await ckc.list(resources.STACK, name)).items:
        with contextlib.suppress(errors.NotFound):
            await ckc.delete(resources.STACK, stack["metadata"]["name"], name)
    real_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


async def new_namespace(ckc: kclient.Client, real_cluster: cluster.Cluster, prefix: str = "cl") -> str:
    """A namespace set up as a user sets one up for Stacks (the chart's `workspaces.serviceAccounts` does the same):
    the workspace pods' account `pulumi` may review the operator's tokens."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    await ckc.create(resources.NAMESPACE.new(name))
    await ckc.create({"apiVersion": "v1", "kind": "ServiceAccount",
                      "metadata": {"name": WORKSPACE_SERVICE_ACCOUNT, "namespace": name}})
    real_cluster.kubectl("create", "clusterrolebinding", f"{name}:{WORKSPACE_SERVICE_ACCOUNT}:system:auth-delegator",
                         "--clusterrole=system:auth-delegator",
                         f"--serviceaccount={name}:{WORKSPACE_SERVICE_ACCOUNT}")
    return name


@pytest.fixture(scope="package")
def pod_git(tmp_path_factory: pytest.TempPathFactory, real_cluster: cluster.Cluster) -> Iterator[gitserver.GitServer]:
    """The test git server, listening at the node's address so that workspace pods reach it, over http and https
    (its CA: `server.ca_pem`; the Go operator takes only https and ssh repositories)."""
    with gitserver.running(tmp_path_factory.mktemp("pod-git"), host=real_cluster.node_ip, tls=True) as server:
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


def upgrade_pko(real_cluster: cluster.Cluster, release: Release, *sets: str) -> None:
    """`helm upgrade --reuse-values` of an installed release with more `--set` pairs, waiting for its new pods."""
    done = helm(real_cluster, "upgrade", release.name, str(CHART), "--namespace", release.namespace,
                "--reuse-values", *(arg for pair in sets for arg in ("--set", pair)), "--wait", "--timeout", "240s",
                check=False)
    assert done.returncode == 0, f"helm upgrade failed:\n{done.stderr}\n{diagnose(real_cluster, release.namespace)}"


def state_dir(root: Path, name: str) -> Path:
    """A directory on the node for one Stack's file backend, writable by the workspace pods' uid 1000, so the
    state outlives any pod (a rolled or replaced pod finds its stack where it left it)."""
    path = root / name
    path.mkdir(mode=0o777, parents=True)
    path.chmod(0o777)
    root.chmod(0o755)
    return path


def round_stack(name: str, namespace: str, round_: int, state: Path) -> dict[str, Any]:
    """A fault test's Stack on the Program `name` (which exports its `round` config), in a workspace pod that
    mounts `state` (see :func:`state_dir`) as its file backend, destroyed on deletion."""
    pod = {"volumes": [{"name": "state", "hostPath": {"path": str(state), "type": "Directory"}}],
           "containers": [{"name": "pulumi", "volumeMounts": [{"name": "state", "mountPath": "/state"}]}]}
    return resources.STACK.new(name, namespace, spec={
        "stack": "dev", "programRef": {"name": name}, "backend": "file:///state", "envRefs": passphrase_env(),
        "config": {"round": str(round_)}, "destroyOnFinalize": True,
        "workspaceTemplate": workspace_template(podTemplate={"spec": pod}),
    })


def round_program(name: str, namespace: str) -> dict[str, Any]:
    """A Program exporting its `round` config: each round is a new Stack generation with a known output."""
    return resources.PROGRAM.new(name, namespace, program={
        "configuration": {"round": {"type": "String"}}, "outputs": {"round": "${round}"}})


@dataclass
class RoundFleet:
    """The fault tests' fleet: `names` Stacks in one namespace, each on its own round Program and state directory,
    changed a round at a time and waited on until every one is Ready at that round."""

    ckc: kclient.Client
    real_cluster: cluster.Cluster
    namespace: str
    states: dict[str, Path]

    @classmethod
    async def create(cls, ckc: kclient.Client, real_cluster: cluster.Cluster, namespace: str, prefix: str,
                     count: int, root: Path) -> RoundFleet:
        states = {f"{prefix}{index}": state_dir(root, f"{prefix}{index}") for index in range(count)}
        fleet = cls(ckc, real_cluster, namespace, states)
        for name, state in fleet.states.items():
            await ckc.create(round_program(name, namespace))
            await ckc.create(round_stack(name, namespace, 0, state))
        return fleet

    @property
    def names(self) -> list[str]:
        return list(self.states)

    async def stacks(self) -> list[dict[str, Any]]:
        return [o for o in (await self.ckc.list(resources.STACK, self.namespace)).items
                if o["metadata"]["name"] in self.states]

    async def change(self, round_: int) -> None:
        for name in self.states:
            await self.ckc.patch(resources.STACK, name, {"spec": {"config": {"round": str(round_)}}}, self.namespace)

    async def wait_round(self, round_: int, timeout: float) -> None:
        """Until every Stack is Ready at `round_`; else fail with what is left and the namespace's diagnostics."""
        async def done() -> bool:
            return sum(1 for o in await self.stacks() if waiting.at_round(o, round_)) == len(self.states)
        try:
            await waiting.eventually(done, f"{len(self.states)} Stacks Ready at round {round_}", timeout, interval=0.5)
        except AssertionError as err:
            left = {o["metadata"]["name"]: o.get("status") or {} for o in await self.stacks()
                    if not waiting.at_round(o, round_)}
            raise AssertionError(f"{err}\n{json.dumps(left, indent=1)[:5000]}\n"
                                 f"{diagnose(self.real_cluster, self.namespace)}") from None
