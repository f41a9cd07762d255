"""The real-cluster test bed as pytest fixtures and helpers, shared by the cluster tier (`tests/cluster`) and the
cross-runs with the Go operator (`tests/interop`).

Why a module of its own: both tiers need the same cluster, namespaces, git server and Helm calls, and a test module
cannot import another directory's `conftest`. Each tier's conftest imports the fixtures it uses.

One cluster per run: booting a node costs a minute or more, and only one cluster runs on a machine at a time. The
cluster is started when the first test needs it and kept for every later package that uses it; the two tiers run
one right after the other (:func:`pytest_collection_modifyitems`), each package hands the next a cluster emptied of
its namespaces and operators (:func:`hand_over`), and the last package that uses it stops it and checks that it
left nothing on the machine, so the tiers after it run without a kubelet beside them.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pko.kube import client as kclient
from pko.kube import errors, resources
from pko.testing import binaries, cluster, gitserver, images, mirror, nodeconfig, objectstore, waiting

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


#: The packages that run on the shared cluster, in the order they run.
CLUSTER_PACKAGES = ("tests/cluster/", "tests/interop/")
#: Namespaces every cluster has; anything else a package leaves is removed before the next one starts.
SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease",
                               nodeconfig.STORAGE_NAMESPACE})
#: pko's kinds, whose finalizers no operator removes once every operator is uninstalled.
OPERATOR_KINDS = ("stacks.pulumi.com", "programs.pulumi.com", "workspaces.auto.pulumi.com",
                  "updates.auto.pulumi.com")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the cluster tier and the interop tier one right after the other (in that order), where the first of
    them would run, so the one cluster they share is up only while they run (imported by the cluster tier's
    conftest: pytest calls it with every collected test)."""
    def package(item: pytest.Item) -> int | None:
        return next((index for index, prefix in enumerate(CLUSTER_PACKAGES) if item.nodeid.startswith(prefix)), None)

    chosen = [item for item in items if package(item) is not None]
    if not chosen:
        return
    first = next(index for index, item in enumerate(items) if package(item) is not None)
    rest = [item for item in items if package(item) is None]
    chosen.sort(key=lambda item: package(item) or 0)  # stable: each package keeps its file order
    items[:] = rest[:first] + chosen + rest[first:]


@dataclass
class SharedCluster:
    """The run's one cluster (while it runs), its work directory and the images built for it, kept in the pytest
    config's stash: a session fixture imported by two conftests would be two fixtures, each with its own value."""

    workdir: Path
    images: dict[str, images.BuiltImage] | None = None
    running: cluster.Cluster | None = None

    def stop(self) -> list[str]:
        """Stop the cluster (if it runs); what it left on the machine."""
        if self.running is None:
            return []
        running, self.running = self.running, None
        running.stop()
        return cluster.leftovers(self.workdir, running.net)


SHARED = pytest.StashKey[SharedCluster]()


def _shared(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> SharedCluster:
    if SHARED not in config.stash:
        shared = config.stash[SHARED] = SharedCluster(tmp_path_factory.mktemp("real-cluster"))

        def last_resort() -> None:
            """A run that ended before the cluster's last package did (-x, Ctrl-C): stop it here."""
            left = shared.stop()
            if left:
                print(f"\nthe real cluster left things behind: {left}", file=sys.stderr)

        config.add_cleanup(last_resort)
    return config.stash[SHARED]


@pytest.fixture(scope="package")
def built_images(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                 ) -> dict[str, images.BuiltImage]:
    """The test images (`make images`), built or found in the cache once per run."""
    shared = _shared(request.config, tmp_path_factory)
    if shared.images is None:
        try:
            shared.images = images.build()
        except images.ImageError as err:
            pytest.fail(f"the test images could not be built: {err}", pytrace=False)
    return shared.images


def _users_after(request: pytest.FixtureRequest) -> bool:
    """Whether a test that will still run after the requesting package uses the real cluster."""
    session = request.session
    if session.shouldstop or session.shouldfail:
        return False
    here = Path(request.node.path)
    mine = [index for index, item in enumerate(session.items) if Path(item.path).is_relative_to(here)]
    later = session.items[max(mine, default=-1) + 1:]
    return any("real_cluster" in getattr(item, "fixturenames", ()) for item in later)


@pytest.fixture(scope="package")
def real_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                 built_images: dict[str, images.BuiltImage]) -> Iterator[cluster.Cluster]:
    """The run's real cluster, with every built image and pko's under the chart's tag: started for the first
    package that needs it, handed over empty to the next, stopped (nothing left behind) after the last."""
    shared = _shared(request.config, tmp_path_factory)
    if shared.running is None:
        try:
            shared.running = cluster.start(shared.workdir, images=built_images.values(),
                                           storage_helper_image=images.PYTHON_BASE_REF)
        except Exception as err:  # a broken test bed fails the tests, never skips them
            pytest.fail(f"could not start the real cluster: {err}", pytrace=False)
        shared.running.tag_image(built_images["pko"].refs[0], PKO_IMAGE)
    yield shared.running
    if _users_after(request):
        hand_over(shared.running)
        return
    left = shared.stop()
    assert not left, f"the cluster left things behind: {left}"


def hand_over(real_cluster: cluster.Cluster, timeout: float = 240) -> None:
    """Empty the cluster for the next package, as a fresh one would be: every Helm release uninstalled, every
    namespace but the system ones deleted and gone (pko's objects in them lose their finalizers once no operator
    is left to remove them), no CRD half deleted. CRDs that stay are the kept ones of an uninstalled chart."""
    listed = helm(real_cluster, "list", "--all-namespaces", "--output", "json", check=False)
    for release in json.loads(listed.stdout or "[]") if listed.returncode == 0 else []:
        helm(real_cluster, "uninstall", release["name"], "--namespace", release["namespace"], "--wait",
             check=False)

    def namespaces() -> list[str]:
        listing = real_cluster.api_get("/api/v1/namespaces") or {}
        return [n["metadata"]["name"] for n in listing.get("items", [])
                if n["metadata"]["name"] not in SYSTEM_NAMESPACES]

    for name in namespaces():
        real_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
    _strip_finalizers(real_cluster)  # no operator is left to run them
    started = time.monotonic()
    forced = False
    while namespaces() or _crds_terminating(real_cluster):
        if time.monotonic() > started + timeout:
            raise AssertionError(f"the cluster could not be emptied for the next package: namespaces "
                                 f"{namespaces()}, CRDs being deleted {_crds_terminating(real_cluster)}")
        if not forced and time.monotonic() > started + 30:
            # a workspace pod's agent may take its whole grace period (600 s) to finish an operation
            for name in namespaces():
                real_cluster.kubectl("delete", "pods", "--all", "-n", name, "--grace-period=0", "--force",
                                     "--wait=false", check=False)
            forced = True
        time.sleep(0.5)


def _crds_terminating(real_cluster: cluster.Cluster) -> list[str]:
    listing = real_cluster.api_get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions") or {}
    return [c["metadata"]["name"] for c in listing.get("items", []) if c["metadata"].get("deletionTimestamp")]


def _strip_finalizers(real_cluster: cluster.Cluster) -> None:
    for kind in OPERATOR_KINDS:
        listed = real_cluster.kubectl("get", kind, "--all-namespaces", "-o", "json", check=False)
        if listed.returncode != 0:
            continue
        for obj in json.loads(listed.stdout).get("items", []):
            meta = obj["metadata"]
            if meta.get("finalizers"):
                print(f"hand-over: removing the finalizers of {kind} {meta['namespace']}/{meta['name']}")
                real_cluster.kubectl("patch", kind, meta["name"], "-n", meta["namespace"], "--type=merge",
                                     "-p", '{"metadata":{"finalizers":null}}', check=False)


def lock_free() -> bool:
    """Whether no cluster holds the machine's cluster lock."""
    fd = os.open(cluster.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


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


def events_of(real_cluster: cluster.Cluster, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
    """The events recorded on one object of `namespace` (what a user sees in `kubectl describe`)."""
    found = (real_cluster.api_get(f"/api/v1/namespaces/{namespace}/events") or {}).get("items", [])
    return [e for e in found if e["involvedObject"].get("kind") == kind and e["involvedObject"]["name"] == name]


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
def cache_upstream(real_cluster: cluster.Cluster) -> Iterator[mirror.Mirror]:
    """The package mirror at the node's address that the operator's dependency cache fills from."""
    mirror.require_filled(*mirror.PARTS)
    with mirror.running(host=real_cluster.node_ip) as server:
        yield server


def dependency_cache_values(upstream: mirror.Mirror) -> list[str]:
    """Chart values that turn the dependency cache on with `upstream`'s plugins, npm and Go parts (helm `--set`
    splits on commas: they are escaped)."""
    upstreams = ",".join(f"{part}={upstream.url}/{part}" for part in ("plugins", "npm", "go"))
    return [f"dependencyCache.upstreams={upstreams.replace(',', chr(92) + ',')}", "dependencyCache.size=2Gi",
            "dependencyCache.indexTTL=30m"]


@pytest.fixture(scope="package")
def operator_release(real_cluster: cluster.Cluster, cache_upstream: mirror.Mirror) -> Iterator[Release]:
    """pko installed from its chart into the cluster, with the image built from the Dockerfile and its dependency
    cache on (workspaces whose Stacks name no mirror of their own get plugins and packages through it)."""
    release = install_pko(real_cluster, *dependency_cache_values(cache_upstream))
    yield release
    uninstall(real_cluster, release)


@pytest.fixture
async def cnamespace(ckc: kclient.Client, real_cluster: cluster.Cluster) -> AsyncIterator[str]:
    """A fresh namespace of the real cluster; its Stacks are deleted (and destroyed) before it goes."""
    name = await new_namespace(ckc, real_cluster)
    yield name
    await remove_namespace(ckc, real_cluster, name)


async def remove_namespace(ckc: kclient.Client, real_cluster: cluster.Cluster, name: str) -> None:
    """Delete the namespace's Stacks (so each is destroyed as its spec says), then the namespace, without waiting."""
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


#: Starts one scenario of a module: (its name, a client, its own new namespace, an exit stack for what it needs).
ScenarioStart = Callable[[str, kclient.Client, str, contextlib.AsyncExitStack], Coroutine[Any, Any, None]]


@contextlib.asynccontextmanager
async def started_scenarios(request: pytest.FixtureRequest, real_cluster: cluster.Cluster, tests: Mapping[str, str],
                            start: ScenarioStart) -> AsyncIterator[dict[str, asyncio.Task[None]]]:
    """Every scenario whose test (`tests`: scenario name → the test that awaits it) this session selected, started
    at once in a namespace of its own, as tasks by scenario name; on exit the tasks are cancelled and the namespaces
    removed. The cluster tier's many slow, independent scenarios then cost the longest one's time, not their sum."""
    selected = {item.name for item in request.session.items if item.path == request.path}
    async with contextlib.AsyncExitStack() as stack:
        ckc = await stack.enter_async_context(kclient.Client.from_kubeconfig(real_cluster.kubeconfig))
        tasks: dict[str, asyncio.Task[None]] = {}
        namespaces = []
        for name, test in tests.items():
            if test not in selected:
                continue
            namespace = await new_namespace(ckc, real_cluster)
            namespaces.append(namespace)
            tasks[name] = asyncio.create_task(start(name, ckc, namespace, stack))
        try:
            yield tasks
        finally:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            for namespace in namespaces:
                await remove_namespace(ckc, real_cluster, namespace)


@pytest.fixture(scope="package")
def pod_git(tmp_path_factory: pytest.TempPathFactory, real_cluster: cluster.Cluster) -> Iterator[gitserver.GitServer]:
    """The test git server, listening at the node's address so that workspace pods reach it, over http and https
    (its CA: `server.ca_pem`; the Go operator takes only https and ssh repositories)."""
    with gitserver.running(tmp_path_factory.mktemp("pod-git"), host=real_cluster.node_ip, tls=True) as server:
        yield server


@pytest.fixture(scope="package")
def pod_store(tmp_path_factory: pytest.TempPathFactory,
              real_cluster: cluster.Cluster) -> Iterator[objectstore.ObjectStore]:
    """An S3-compatible object store (gofakes3) at the node's address, for Stacks whose state lives in a bucket."""
    with objectstore.running(tmp_path_factory.mktemp("pod-store"), host=real_cluster.node_ip) as store:
        yield store


def mirror_env(server: mirror.Mirror, *names: str) -> dict[str, Any]:
    """A Stack's `envRefs` pointing its workspace at the mirror (all of `Mirror.env()`, or only `names`)."""
    env = server.env()
    return {k: {"type": "Literal", "literal": {"value": v}} for k, v in env.items() if not names or k in names}


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
