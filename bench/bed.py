"""The benchmark bed: one real cluster, one operator installed at a time from its own Helm chart, and what the
harness measures about it from outside — when Stacks turn Ready, what the operator's pod costs in CPU and memory
(read from its cgroup on the node), and how many API requests its service account made (from the API server's
audit log).

Why from outside: both operators must be measured alike, and neither exports the same figures about itself (the
Go operator's client metrics and pko's differ in names and coverage). The node's cgroups and the API server's audit
log see every process and every client the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.workload import Realistic
from pko.kube import client as kclient
from pko.kube import errors, resources
from pko.testing import cluster, crossrun
from pko.testing.clusterbed import (
    OPERATOR_KINDS,
    OPERATOR_NAMESPACE,
    PKO_IMAGE,
    RELEASE,
    diagnose,
    helm,
    install_pko,
    passphrase_env,
    workspace_template,
)

Object = dict[str, Any]
#: How often the harness looks at Stacks and samples the operator's memory.
POLL = 0.5
#: A YAML program with one config value: each change of it is an update with a new output.
PROGRAM = {"configuration": {"greeting": {"type": "String"}}, "outputs": {"greeting": "${greeting}"}}
#: The same small CPU request for the workspace pods of both operators, so that a fleet fits a small node.
WORKSPACE_CPU = "25m"


@dataclass(frozen=True)
class Operator:
    """One operator as the benchmark installs it: its chart, namespace, release and the image of its agent."""

    name: str
    namespace: str
    release: str
    agent_image: str

    def install(self, bed: cluster.Cluster, *values: str, git_ca: str | None = None) -> None:
        if self.name == "pko":
            install_pko(bed, "controller.metricsSecure=false", *values, git_ca=git_ca)
        else:
            crossrun.install_go_operator(bed, crossrun.go_chart(), *values, git_ca=git_ca)

    def uninstall(self, bed: cluster.Cluster) -> None:
        """Uninstall the release. The Go operator's chart installs its CRDs from `crds/`, which Helm never removes
        and pko's chart will not take over: they go too, so the next operator starts on a cluster as fresh as the
        first did, whichever order `--operators` gives."""
        helm(bed, "uninstall", self.release, "--namespace", self.namespace, "--wait", "--ignore-not-found",
             check=False, timeout=300)
        if self.name == "go":
            bed.kubectl("delete", "crd", "--ignore-not-found", "--wait", *OPERATOR_KINDS, timeout=120)

    def username(self, bed: cluster.Cluster) -> str:
        """The API user the operator acts as: its Deployment's service account."""
        account = bed.kubectl("get", "deployments", "-n", self.namespace, "-o",
                              "jsonpath={.items[0].spec.template.spec.serviceAccountName}").stdout.strip()
        return f"system:serviceaccount:{self.namespace}:{account or 'default'}"

    def pods(self, bed: cluster.Cluster) -> list[Object]:
        listing = bed.api_get(f"/api/v1/namespaces/{self.namespace}/pods") or {}
        return [pod for pod in listing.get("items", []) if pod["metadata"].get("deletionTimestamp") is None]


PKO = Operator("pko", OPERATOR_NAMESPACE, RELEASE, PKO_IMAGE)
GO = Operator("go", crossrun.GO_NAMESPACE, crossrun.GO_RELEASE, crossrun.GO_IMAGE)
OPERATORS = {"pko": PKO, "go": GO}


@dataclass(frozen=True)
class WorkspacePods:
    """The workspace pods of one namespace, for a :class:`CostMeter`: what the Stacks' own work costs."""

    namespace: str

    def pods(self, bed: cluster.Cluster) -> list[Object]:
        return [pod for pod in pods(bed, self.namespace, WORKSPACE_PODS)
                if pod["metadata"].get("deletionTimestamp") is None]


# ---------------------------------------------------------------------------------------------------------------
# Cost of pods, from their cgroups on this node (v1 or v2, cgroupfs driver as the test bed's kubelet uses)

def _pod_dirs(controller: str, uid: str) -> list[Path]:
    root = Path("/sys/fs/cgroup")
    base = root / controller if (root / controller).is_dir() else root
    found = list(base.glob(f"kubepods*/pod{uid}")) + list(base.glob(f"kubepods*/*/pod{uid}"))
    return found[:1]


def pod_cpu_seconds(uid: str) -> float | None:
    """CPU time of every container of a pod so far (None once the pod's cgroup is gone)."""
    for directory in _pod_dirs("cpuacct", uid):
        usage = directory / "cpuacct.usage"
        if usage.exists():
            with contextlib.suppress(OSError, ValueError):
                return int(usage.read_text()) / 1e9
        stat = directory / "cpu.stat"
        with contextlib.suppress(OSError, ValueError):
            for line in stat.read_text().splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
    return None


def pod_rss_bytes(uid: str) -> int | None:
    """Resident anonymous memory of a pod's processes (page cache left out, as RSS leaves it out)."""
    for directory in _pod_dirs("memory", uid):
        with contextlib.suppress(OSError, ValueError):
            stat = dict(line.split() for line in (directory / "memory.stat").read_text().splitlines())
            return int(stat.get("total_rss", stat.get("anon", "0")))
    return None


@dataclass
class CostMeter:
    """Samples the CPU and RSS of an operator's pods (or of a namespace's workspace pods: :class:`WorkspacePods`)
    while a scenario runs, in a thread of its own (a scenario's event loop may be busy). CPU is summed per pod (a
    replaced pod adds its own); RSS is the peak of any sample."""

    bed: cluster.Cluster
    source: Operator | WorkspacePods  # whose pods
    cpu_start: dict[str, float] = field(default_factory=dict)
    cpu_last: dict[str, float] = field(default_factory=dict)
    peak_rss: int = 0
    rss_samples: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _first: bool = True

    def _sample(self) -> None:
        for pod in self.source.pods(self.bed):
            uid = pod["metadata"]["uid"]
            cpu = pod_cpu_seconds(uid)
            if cpu is not None:
                # a pod there from the start counts from now; a pod that comes later, from its beginning
                self.cpu_start.setdefault(uid, cpu if self._first else 0.0)
                self.cpu_last[uid] = cpu
            rss = pod_rss_bytes(uid)
            if rss is not None:
                self.peak_rss = max(self.peak_rss, rss)
                self.rss_samples.append(rss)

    def _run(self) -> None:
        while not self._stop.wait(POLL):
            with contextlib.suppress(Exception):
                self._sample()

    def __enter__(self) -> CostMeter:
        self._sample()
        self._first = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self._sample()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    @property
    def cpu_seconds(self) -> float:
        return sum(self.cpu_last[uid] - self.cpu_start.get(uid, 0.0) for uid in self.cpu_last)

    @property
    def mean_rss(self) -> float:
        return statistics.fmean(self.rss_samples) if self.rss_samples else 0.0


# ---------------------------------------------------------------------------------------------------------------
# API requests, from the audit log

def _audit_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def api_requests(bed: cluster.Cluster, username: str, since: float, until: float) -> int:
    """Requests `username` made between two wall-clock times (one audit entry per request: a watch is counted when
    it starts, a request when it ends)."""
    return sum(api_breakdown(bed, username, since, until).values())


def api_breakdown(bed: cluster.Cluster, username: str, since: float, until: float) -> Counter[str]:
    """The same requests by kind: "verb resource[/subresource]", e.g. "patch stacks/status"."""
    return audit_breakdown(bed.audit_log, since, until, username=username)


#: The verbs that change something (a write costs the API server and etcd, and wakes every watcher of the kind).
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def audit_breakdown(audit_log: Path, since: float, until: float, *, username: str | None = None,
                    user_agent: str | None = None) -> Counter[str]:
    """The requests of one user (or of one User-Agent: operators in the harness's process share its account) in
    an audit log and its rotated files, by kind: "verb resource[/subresource]", e.g. "patch stacks/status"."""
    needle = username or user_agent or ""
    seen: dict[str, str] = {}
    for path in sorted(audit_log.parent.glob("audit*.log")):
        with path.open() as lines:
            for line in lines:
                if needle not in line:
                    continue
                with contextlib.suppress(ValueError, KeyError):
                    entry = json.loads(line)
                    if username is not None and entry["user"]["username"] != username:
                        continue
                    if user_agent is not None and not entry.get("userAgent", "").startswith(user_agent):
                        continue
                    when = _audit_time(entry.get("stageTimestamp") or entry["requestReceivedTimestamp"])
                    if since <= when <= until:
                        ref = entry.get("objectRef") or {}
                        what = ref.get("resource", entry.get("requestURI", "?"))
                        if ref.get("subresource"):
                            what += f"/{ref['subresource']}"
                        seen[entry["auditID"]] = f"{entry['verb']} {what}"
    return Counter(seen.values())


# ---------------------------------------------------------------------------------------------------------------
# Stacks

def stack_spec(name: str, greeting: str = "hello", *, local: bool = False) -> Object:
    """A Program Stack as both operators run it: the file backend inside the pod, the same small pod request.
    `local`: for pko's local runtime (no pod: the agents' environment names the backend)."""
    spec: Object = {"stack": "dev", "programRef": {"name": name}, "envRefs": passphrase_env(),
                    "config": {"greeting": greeting}}
    if not local:
        template = workspace_template()
        template["spec"]["resources"] = {"requests": {"cpu": WORKSPACE_CPU, "memory": "64Mi"}}
        spec.update(backend="file:///tmp", workspaceTemplate=template)
    return spec


def is_ready(stack: Object, greeting: str | None = None) -> bool:
    status = stack.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    if not ready:
        return False
    last = status.get("lastUpdate") or {}
    if last.get("generation") not in (None, stack["metadata"].get("generation")):
        return False
    return greeting is None or (status.get("outputs") or {}).get("greeting") == greeting


async def create_program_stacks(kc: kclient.Client, namespace: str, names: Iterable[str], *,
                                local: bool = False, workload: Realistic | None = None) -> None:
    """The benchmark's Stacks: Program Stacks (the small YAML program), or `workload`'s realistic program."""
    if workload is not None:
        await workload.create(kc, namespace, names)
        return

    async def one(name: str) -> None:
        await kc.create(resources.PROGRAM.new(name, namespace, program=PROGRAM))
        await kc.create(resources.STACK.new(name, namespace, spec=stack_spec(name, local=local)))
    await asyncio.gather(*(one(name) for name in names))


async def watch_ready(kc: kclient.Client, bed: cluster.Cluster | None, namespace: str, names: Iterable[str],
                      start: float, timeout: float, ready: Callable[[Object], bool] = is_ready,
                      progress: Callable[[int, int], None] | None = None,
                      give_up: bool = False) -> dict[str, float]:
    """Seconds from `start` (monotonic) until each named Stack is first seen `ready`, from a list and then a watch
    of the namespace's Stacks; `progress` is called every :data:`POLL` seconds. `bed`: the cluster whose pods a
    timeout describes (None: a control plane without pods). At `timeout`: an error, or with `give_up` the Stacks
    Ready by then (a fleet that cannot converge is a figure too).

    Why a watch: the harness runs in the operator's process (the local fleet reports their CPU together), and a
    listing of every Stack each half second decoded N Stacks N times over a fleet's run: at 300 Stacks it was a
    seventh of that process's event loop, counted as the operator's."""
    waiting = set(names)
    done: dict[str, float] = {}

    def see(stack: Object) -> None:
        name = stack["metadata"]["name"]
        if name in waiting and ready(stack):
            done[name] = time.monotonic() - start
            waiting.discard(name)

    async def follow() -> None:
        while True:
            listing = await kc.list(resources.STACK, namespace)
            for stack in listing.items:
                see(stack)
            with contextlib.suppress(errors.Gone):  # the version fell out of the server's window: list again
                async for event in kc.watch(resources.STACK, namespace, resource_version=listing.resource_version,
                                            timeout_seconds=300):
                    if event.type in ("ADDED", "MODIFIED"):
                        see(event.object)

    deadline = time.monotonic() + timeout
    watching = asyncio.create_task(follow())
    try:
        while True:
            if progress is not None:
                progress(len(done), len(done) + len(waiting))
            if not waiting:
                break
            if watching.done():
                watching.result()  # the watch's error, if it ended with one
            if time.monotonic() > deadline:
                if give_up:
                    break
                pods = diagnose(bed, namespace)[-6000:] if bed is not None else ""
                raise TimeoutError(f"{len(waiting)} Stacks not Ready after {timeout:.0f}s "
                                   f"(e.g. {sorted(waiting)[:3]})\n{pods}")
            await asyncio.sleep(POLL)
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
    return done


#: The workspace pods of both operators (a realistic program's own pods share their namespace).
WORKSPACE_PODS = "auto.pulumi.com/component=workspace"


def pods(bed: cluster.Cluster, namespace: str, selector: str = "") -> list[Object]:
    """The pods of `namespace` (matching `selector`), from one listing."""
    query = f"?labelSelector={urllib.parse.quote(selector)}" if selector else ""
    return list((bed.api_get(f"/api/v1/namespaces/{namespace}/pods{query}") or {}).get("items", []))


def pod_phases(bed: cluster.Cluster, namespace: str, selector: str = "") -> Counter[str]:
    """The pods of `namespace` (matching `selector`) by phase, from one listing."""
    return Counter(str(pod.get("status", {}).get("phase")) for pod in pods(bed, namespace, selector))


def sampled_pod_phases(bed: cluster.Cluster, namespace: str, selector: str = "") -> Counter[str] | None:
    """:func:`pod_phases` for a figure sampled while a fleet loads the cluster: None when the API server did not
    answer in time. A missed sample, not a failed run: a busy API server is what a fleet makes (a 280-Stack run
    died of one 5-second timeout)."""
    try:
        return pod_phases(bed, namespace, selector)
    except OSError:
        return None


def count_pods(bed: cluster.Cluster, namespace: str, selector: str = "",
               phases: tuple[str, ...] = ("Pending", "Running")) -> int:
    found = pod_phases(bed, namespace, selector)
    return sum(found[phase] for phase in phases)


async def updates_in(kc: kclient.Client, namespace: str) -> list[Object]:
    return list((await kc.list(resources.UPDATE, namespace)).items)


async def empty_namespace(kc: kclient.Client, bed: cluster.Cluster, namespace: str, timeout: float = 600) -> None:
    """Delete every Stack (the operator is still there to remove its finalizer), wait until the Stacks are gone, then
    delete the namespace and wait until its pods are gone (the workspaces', and those a realistic program made): the
    next operator starts on an idle node."""
    for stack in (await kc.list(resources.STACK, namespace)).items:
        with contextlib.suppress(errors.NotFound):
            await kc.delete(resources.STACK, stack["metadata"]["name"], namespace)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not (await kc.list(resources.STACK, namespace)).items:
            break
        await asyncio.sleep(1)
    bed.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    while time.monotonic() < deadline:
        if count_pods(bed, namespace) == 0:
            break
        await asyncio.sleep(1)


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile (p50, p95) of a small sample."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), round(fraction * len(ordered) + 0.5)))
    return ordered[rank - 1]



@contextlib.contextmanager
def wall_window() -> Iterator[list[float]]:
    """[start, end] wall-clock times of a block, for the audit log."""
    window = [time.time()]
    try:
        yield window
    finally:
        window.append(time.time())

