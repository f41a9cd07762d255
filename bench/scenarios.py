"""The eight benchmark scenarios. Each runs against the one operator installed in the bed and returns its figures; the
harness runs it for every operator in turn and compares them. The same program, Stacks, pod requests and cluster
for both operators: nothing here knows which operator it measures except through `Operator`.

A scenario leaves the cluster as it found it (its Stacks deleted while the operator is still there to finalize
them, their pods gone), so the next operator starts on an idle node.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import bed as b
from bench.workload import Realistic
from pko.kube import client as kclient
from pko.kube import objects, resources
from pko.testing import binaries, cluster, crossrun, gitserver, podprocs, pulumi, waiting
from pko.testing.clusterbed import ROOT, diagnose, new_namespace, passphrase_env

Figures = dict[str, float]


@dataclass
class Context:
    """What every scenario gets: the cluster, an admin client, the sizes asked for, and a progress line."""

    bed: cluster.Cluster
    kc: kclient.Client
    stacks: int
    changes: int
    idle_seconds: float
    sleep_seconds: float
    git: gitserver.GitServer | None = None
    say: Callable[[str], None] = print
    workload: Realistic | None = None  # None: the small YAML Program (`--program yaml`)
    notes: list[str] = field(default_factory=list)
    #: fleet: stop waiting after this many seconds and report the Stacks Ready by then (None: wait until all are,
    #: or fail); for an operator that cannot run the whole fleet on the node (the Go operator's pod per Stack)
    deadline: float | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    headline: str  # the figure the `<scenario>: pko/go = <ratio>` line compares
    lower_is_better: bool
    run: Callable[[Context, b.Operator], Awaitable[Figures]]
    needs_git: bool = False
    # it replaces the operator's pod: beside another scenario it would cut that one's reconciles short
    disturbs_operator: bool = False


def _progress(ctx: Context, operator: b.Operator, what: str) -> Callable[[int, int], None]:
    last = [-1]

    def show(done: int, total: int) -> None:
        if done != last[0]:
            last[0] = done
            ctx.say(f"  [{operator.name}] {what}: {done}/{total} Ready")
    return show


async def _fleet_ready(ctx: Context, operator: b.Operator, namespace: str, count: int, what: str
                       ) -> dict[str, float]:
    names = [f"s{i:03d}" for i in range(count)]
    start = time.monotonic()
    await b.create_program_stacks(ctx.kc, namespace, names, workload=ctx.workload)
    return await b.watch_ready(ctx.kc, ctx.bed, namespace, names, start, timeout=300 + 20 * count,
                               progress=_progress(ctx, operator, what))


def _ts(text: str | None) -> float | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


def _span(start: float | None, end: float | None) -> float | None:
    return end - start if start is not None and end is not None else None


async def phases(ctx: Context, namespace: str) -> Figures:
    """Where a Stack's time went (medians over the namespace, from the objects' own timestamps, 1 s resolution):
    the pod's init containers, the pod becoming Ready, the wait until the Update was created, the Update's run."""
    spans: dict[str, list[float]] = {"pod→fetch done (s)": [], "fetch (s)": [], "pod→Ready (s)": [],
                                     "Stack→Update (s)": [], "Update run (s)": []}
    stacks = {s["metadata"]["name"]: _ts(s["metadata"]["creationTimestamp"])
              for s in (await ctx.kc.list(resources.STACK, namespace)).items}
    for pod in (await ctx.kc.list(resources.POD, namespace)).items:
        created = _ts(pod["metadata"]["creationTimestamp"])
        for status in pod.get("status", {}).get("initContainerStatuses") or []:
            done = (status.get("state") or {}).get("terminated") or {}
            if status["name"] == "fetch" and done:
                for key, value in (("pod→fetch done (s)", _span(created, _ts(done.get("finishedAt")))),
                                   ("fetch (s)", _span(_ts(done.get("startedAt")), _ts(done.get("finishedAt"))))):
                    if value is not None:
                        spans[key].append(value)
        ready: dict[str, Any] = next((c for c in pod.get("status", {}).get("conditions") or []
                                      if c["type"] == "Ready"), {})
        if ready.get("status") == "True" and (value := _span(created, _ts(ready.get("lastTransitionTime")))):
            spans["pod→Ready (s)"].append(value)
    for update in await b.updates_in(ctx.kc, namespace):
        stack = next((o["name"] for o in update["metadata"].get("ownerReferences") or [] if o["kind"] == "Stack"),
                     None)
        status = update.get("status") or {}
        for key, value in (("Stack→Update (s)", _span(stacks.get(stack or ""),
                                                        _ts(update["metadata"]["creationTimestamp"]))),
                           ("Update run (s)", _span(_ts(status.get("startTime")), _ts(status.get("endTime"))))):
            if value is not None:
                spans[key].append(value)
    return {f"median {key}": statistics.median(values) for key, values in spans.items() if values}


# ---------------------------------------------------------------------------------------------------------------

async def fleet(ctx: Context, operator: b.Operator) -> Figures:
    """N Program Stacks applied at once: time to all Ready, per-Stack p50/p95, the operator's CPU, peak RSS and
    API requests while it converged, the peak number of pods (and of Pending ones). With a deadline
    (`ctx.deadline`), the Stacks Ready by then when not all are (the times are then not a fleet's: NaN)."""
    namespace = await new_namespace(ctx.kc, ctx.bed, "fleet")
    user = operator.username(ctx.bed)
    peak_pods = [0]
    progress = _progress(ctx, operator, "fleet")
    names = [f"s{i:03d}" for i in range(ctx.stacks)]
    pending_pods = [0]

    def watch(done: int, total: int) -> None:
        phases = b.sampled_pod_phases(ctx.bed, namespace, b.WORKSPACE_PODS)
        if phases is not None:
            peak_pods[0] = max(peak_pods[0], phases["Pending"] + phases["Running"])
            pending_pods[0] = max(pending_pods[0], phases["Pending"])
        progress(done, total)
    if ctx.workload is not None:
        ctx.workload.fresh_node(ctx.bed)
    try:
        with b.CostMeter(ctx.bed, operator) as cost, b.wall_window() as window, \
                b.CostMeter(ctx.bed, b.WorkspacePods(namespace)) as workspaces:
            start = time.monotonic()
            plugins_before = ctx.workload.plugin_megabytes() if ctx.workload is not None else 0.0
            images_before = ctx.workload.plugin_image_megabytes() if ctx.workload is not None else 0.0
            await b.create_program_stacks(ctx.kc, namespace, names, workload=ctx.workload)
            done = await b.watch_ready(ctx.kc, ctx.bed, namespace, names, start,
                                       timeout=ctx.deadline or 300 + 20 * ctx.stacks, progress=watch,
                                       give_up=ctx.deadline is not None)
        times = list(done.values()) or [float("nan")]
        everyone = len(done) == len(names)
        if not everyone:
            ctx.say(f"  [{operator.name}] {len(done)} of {len(names)} Stacks Ready at the deadline "
                    f"({ctx.deadline:.0f}s); workspace pods by phase: "
                    f"{dict(b.pod_phases(ctx.bed, namespace, b.WORKSPACE_PODS))}")
        kinds = b.api_breakdown(ctx.bed, user, window[0], window[1])  # read once: the count is its sum
        ctx.say(f"  [{operator.name}] API requests by kind: "
                + ", ".join(f"{what} {count}" for what, count in kinds.most_common(10)))
        return {"all Ready (s)": max(times) if everyone else float("nan"),
                "Ready at the end": float(len(done)),
                "Stack Ready p50 (s)": b.percentile(times, 0.5) if everyone else float("nan"),
                "Stack Ready p95 (s)": b.percentile(times, 0.95) if everyone else float("nan"),
                "operator CPU (s)": cost.cpu_seconds,
                "operator peak RSS (MB)": cost.peak_rss / 1e6,
                "workspace pods CPU (s)": workspaces.cpu_seconds,
                "API requests": float(sum(kinds.values())),
                "peak pods": float(peak_pods[0]), "peak Pending pods": float(pending_pods[0]),
                **await phases(ctx, namespace),
                **({"plugin MB from the mirror": ctx.workload.plugin_megabytes() - plugins_before,
                    "plugin image MB pulled": ctx.workload.plugin_image_megabytes() - images_before}
                   if ctx.workload is not None else {})}
    finally:
        await b.empty_namespace(ctx.kc, ctx.bed, namespace)


# ---------------------------------------------------------------------------------------------------------------

SLOW_PROJECT = """name: slow
runtime:
  name: python
  options:
    toolchain: pip
    virtualenv: venv
"""
SLOW_PROGRAM = """import time

import pulumi

time.sleep(float(pulumi.Config().get("sleep") or "30"))
pulumi.export("greeting", "slept")
"""


async def _create_slow_stacks(ctx: Context, namespace: str, names: list[str]) -> None:
    """Stacks of a Python program from Git that sleeps `ctx.sleep_seconds` in its `up`, then exports "slept"."""
    assert ctx.git is not None
    await crossrun.trust_git_ca(ctx.kc, namespace, ctx.git)
    repo = f"bench/slow-{namespace}"
    ctx.git.create_repo(repo, {"Pulumi.yaml": SLOW_PROJECT, "__main__.py": SLOW_PROGRAM,
                               "requirements.txt": "pulumi>=3.0.0,<4.0.0\n"})
    template = crossrun.trusting_workspace_template()
    template["spec"]["resources"] = {"requests": {"cpu": b.WORKSPACE_CPU, "memory": "64Mi"}}
    await asyncio.gather(*(ctx.kc.create(resources.STACK.new(name, namespace, spec={
        "stack": "dev", "projectRepo": ctx.git.https_url(repo), "branch": "main", "backend": "file:///tmp",
        "envRefs": passphrase_env(), "config": {"sleep": str(ctx.sleep_seconds)},
        "workspaceTemplate": template})) for name in names))


async def _slow_stacks(ctx: Context, operator: b.Operator, namespace: str, count: int, what: str) -> list[float]:
    names = [f"slow{i:03d}" for i in range(count)]
    start = time.monotonic()
    await _create_slow_stacks(ctx, namespace, names)
    done = await b.watch_ready(ctx.kc, ctx.bed, namespace, names, start, timeout=900 + 30 * count,
                               ready=lambda s: b.is_ready(s, "slept"), progress=_progress(ctx, operator, what))
    return list(done.values())


async def concurrency(ctx: Context, operator: b.Operator) -> Figures:
    """One Stack whose program sleeps, alone; then N of them at once: how much longer N take than one. A cap on
    concurrent operations (the Go operator's 25 workers) shows as steps."""
    alone_ns = await new_namespace(ctx.kc, ctx.bed, "alone")
    try:
        alone = max(await _slow_stacks(ctx, operator, alone_ns, 1, "one alone"))
    finally:
        await b.empty_namespace(ctx.kc, ctx.bed, alone_ns)
    many_ns = await new_namespace(ctx.kc, ctx.bed, "many")
    try:
        times = await _slow_stacks(ctx, operator, many_ns, ctx.stacks, "all at once")
    finally:
        await b.empty_namespace(ctx.kc, ctx.bed, many_ns)
    return {"all succeeded (s)": max(times), "one alone (s)": alone, "all / one": max(times) / alone,
            "Stack Ready p50 (s)": b.percentile(times, 0.5)}


# ---------------------------------------------------------------------------------------------------------------

async def _workspaces_made(ctx: Context, namespace: str, names: list[str], deadline: float) -> None:
    """Wait until each of `names` has its Workspace."""
    while True:
        made = {objects.name_of(w) for w in (await ctx.kc.list(resources.WORKSPACE, namespace)).items}
        if made >= set(names):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"no Workspace for {sorted(set(names) - made)}\n{diagnose(ctx.bed, namespace)}")
        await asyncio.sleep(b.POLL)


def long_share(stacks: int) -> tuple[int, int, int]:
    """How a replay of PKO#1293 splits `stacks`: (long, lost, short). 8 in 280 run long operations (the 8 slots the
    issue found held by dead operations), at least one; the agents of half of them (rounded down) are killed; the
    rest are the small Program, at least one."""
    long_ = max(1, round(stacks * 8 / 280))
    return long_, long_ // 2, max(1, stacks - long_)


def _true(obj: b.Object, type_: str) -> bool:
    return waiting.condition(obj, type_).get("status") == "True"


def _workspace_of(update: b.Object) -> str | None:
    """The Workspace (and so the Stack) an Update belongs to: its controller."""
    return next((ref["name"] for ref in update["metadata"].get("ownerReferences") or [] if ref.get("controller")),
                None)


async def _running(ctx: Context, namespace: str) -> set[str]:
    """The workspaces with an `up` under way: its Update Progressing and the Pulumi CLI running `pulumi up` in the
    workspace's pod, seen in the node's /proc (an Update can be Progressing before its `up` reaches the agent, or
    be waiting for its workspace; pko's, queued for a slot of the pool, too)."""
    progressing = {_workspace_of(u) for u in await b.updates_in(ctx.kc, namespace) if _true(u, "Progressing")}
    try:
        pods = b.pods(ctx.bed, namespace, b.WORKSPACE_PODS)
    except OSError:  # the API server busy: none seen running this time, the kill point waits for the next look
        return set()
    running = {str(p["metadata"]["uid"]): p["metadata"].get("labels", {}).get("auto.pulumi.com/workspace-name")
               for p in pods if p.get("status", {}).get("phase") == "Running"}
    upping = await asyncio.to_thread(podprocs.running_command, running, "up")
    return {name for name in progressing if name is not None} & {running[uid] for uid in upping}


def _kill_container(ctx: Context, pod: b.Object, name: str) -> None:
    """SIGKILL one container of a pod (as the kernel's OOM killer does): the kubelet starts it again in the same pod."""
    ctx.bed.ctr("task", "kill", "--signal", "SIGKILL", podprocs.container_id(pod, name), check=False)


def _restarts(pods: list[b.Object]) -> int:
    return sum(s.get("restartCount", 0) for p in pods for s in (p.get("status") or {}).get("containerStatuses") or [])


async def killed(ctx: Context, operator: b.Operator) -> Figures:
    """A replay of PKO#1293 (25 of 25 workers busy, 8 held by dead operations for hours): N Stacks at once, a few of
    them with long operations (a program that sleeps `--sleep` seconds in its `up`, created first and the others only
    once their Workspaces exist, so they hold slots as long operations do). Once every long one is in its `up` and a
    third of the others are Ready, the operator's container is SIGKILLed, and so are the agents of half the long
    ones: those operations are dead, the others still run in their pods. Until every Stack is Ready again: how
    long, how many Updates each Stack took (1 where the agent lived: its running `up` adopted, not run twice; 2
    where it died), the Stacks Stalled at the end, and the most workspace pods at once (pko with a pool: never more
    than the pool)."""
    namespace = await new_namespace(ctx.kc, ctx.bed, "killed")
    long_, lost, short = long_share(ctx.stacks)
    long_names = [f"slow{i:03d}" for i in range(long_)]
    names = [*long_names, *(f"s{i:03d}" for i in range(short))]
    peak_pods = [0]

    def ready(stack: b.Object) -> bool:
        return b.is_ready(stack, "slept" if stack["metadata"]["name"] in long_names else None)

    def watch(done: int, total: int) -> None:
        phases = b.sampled_pod_phases(ctx.bed, namespace, b.WORKSPACE_PODS)
        if phases is not None:
            peak_pods[0] = max(peak_pods[0], phases["Pending"] + phases["Running"])
        progress(done, total)
    progress = _progress(ctx, operator, "killed")
    try:
        start = time.monotonic()
        await _create_slow_stacks(ctx, namespace, long_names)
        # their Workspaces first, as the long operations held their slots before the queue behind them:
        # a Stack from Git has its Workspace only once its commit is resolved, a Program's at once, so without
        # this wait the long ones came late in the pool's queue and some were done before the last one started
        await _workspaces_made(ctx, namespace, long_names, start + 300)
        await b.create_program_stacks(ctx.kc, namespace, names[long_:])
        deadline = start + 900 + 10 * len(names)
        while True:  # the kill point: what the Stacks show, never a fixed time
            stacks = {s["metadata"]["name"]: s for s in (await ctx.kc.list(resources.STACK, namespace)).items}
            under_way = await _running(ctx, namespace)
            done_long = [n for n in long_names if n in stacks and ready(stacks[n])]
            running = [n for n in long_names if n in under_way and n not in done_long]
            ready_now = sum(1 for s in stacks.values() if ready(s))
            watch(ready_now, len(names))
            if len(running) + len(done_long) == long_ and ready_now - len(done_long) >= short // 3:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the kill point was never reached\n{diagnose(ctx.bed, namespace)}")
            await asyncio.sleep(b.POLL)
        operator_pods = operator.pods(ctx.bed)
        restarts = _restarts(operator_pods)
        killed_at = time.monotonic()
        for pod in operator_pods:
            _kill_container(ctx, pod, pod["spec"]["containers"][0]["name"])
        dead = running[:lost]
        for name in dead:
            workspace_pod = ctx.bed.api_get(f"/api/v1/namespaces/{namespace}/pods/{name}-workspace-0")
            if workspace_pod is not None:
                _kill_container(ctx, workspace_pod, "pulumi")
        ctx.say(f"  [{operator.name}] killed the operator with {ready_now}/{len(names)} Ready, "
                f"{len(running)} long operations running, the agents of {len(dead)} of them too")
        back: float | None = None
        pending = set(names)
        done: dict[str, float] = {}
        end = killed_at + (ctx.deadline or 900 + 10 * len(names))
        while (pending or back is None) and time.monotonic() < end:
            with contextlib.suppress(OSError):  # the API server busy: look again at the next poll
                if back is None and _restarts(now := operator.pods(ctx.bed)) > restarts and _all_ready(now):
                    back = time.monotonic() - killed_at
            for stack in (await ctx.kc.list(resources.STACK, namespace)).items:
                if stack["metadata"]["name"] in pending and ready(stack):
                    pending.discard(stack["metadata"]["name"])
                    done[stack["metadata"]["name"]] = time.monotonic() - killed_at
            watch(len(names) - len(pending), len(names))
            await asyncio.sleep(b.POLL)
        if pending:
            ctx.say(f"  [{operator.name}] {len(pending)} Stacks not Ready {end - killed_at:.0f}s after the kill "
                    f"(e.g. {sorted(pending)[:3]})")
        stacks = {s["metadata"]["name"]: s for s in (await ctx.kc.list(resources.STACK, namespace)).items}
        per_stack = Counter(_workspace_of(u) for u in await b.updates_in(ctx.kc, namespace))
        lived = [n for n in names if n not in dead]
        return {"all Ready after the kill (s)": max(done.values()) if not pending else float("nan"),
                "Ready at the kill": float(ready_now), "Ready at the end": float(len(names) - len(pending)),
                "operator back (s)": float("nan") if back is None else back,
                "long operations running at the kill": float(len(running)),
                "long operations run twice (agent alive)": float(sum(
                    1 for n in running[lost:] if per_stack[n] > 1)),
                "Updates a Stack (agent alive)": sum(per_stack[n] for n in lived) / len(lived),
                **({"Updates a Stack (agent killed)": sum(per_stack[n] for n in dead) / len(dead)} if dead else {}),
                "Stalled at the end": float(sum(1 for s in stacks.values() if _true(s, "Stalled"))),
                "peak workspace pods": float(peak_pods[0])}
    finally:
        await b.empty_namespace(ctx.kc, ctx.bed, namespace)


# ---------------------------------------------------------------------------------------------------------------

async def latency(ctx: Context, operator: b.Operator) -> Figures:
    """A warm, Ready Stack, changed `changes` times: from the change to its Update existing, and to Ready again."""
    namespace = await new_namespace(ctx.kc, ctx.bed, "latency")
    try:
        await _fleet_ready(ctx, operator, namespace, 1, "warm-up")
        to_start: list[float] = []
        to_ready: list[float] = []
        for change in range(ctx.changes):
            greeting = f"change-{change}"
            before = {u["metadata"]["name"] for u in await b.updates_in(ctx.kc, namespace)}
            start = time.monotonic()
            await ctx.kc.patch(resources.STACK, "s000", {"spec": {"config": {"greeting": greeting}}}, namespace)
            started = None
            deadline = start + 300
            while time.monotonic() < deadline:
                if started is None:
                    now = {u["metadata"]["name"] for u in await b.updates_in(ctx.kc, namespace)}
                    if now - before:
                        started = time.monotonic() - start
                stack = await ctx.kc.get(resources.STACK, "s000", namespace)
                if started is not None and b.is_ready(stack, greeting):
                    to_start.append(started)
                    to_ready.append(time.monotonic() - start)
                    break
                await asyncio.sleep(0.1)
            else:
                raise TimeoutError(f"change {change} was not deployed in 300s\n{diagnose(ctx.bed, namespace)}")
            ctx.say(f"  [{operator.name}] change {change + 1}/{ctx.changes}: update after {started:.2f}s, "
                    f"Ready after {to_ready[-1]:.2f}s")
        return {"change→Update p50 (s)": b.percentile(to_start, 0.5),
                "change→Update p95 (s)": b.percentile(to_start, 0.95),
                "change→Ready p50 (s)": b.percentile(to_ready, 0.5),
                "change→Ready p95 (s)": b.percentile(to_ready, 0.95)}
    finally:
        await b.empty_namespace(ctx.kc, ctx.bed, namespace)


# ---------------------------------------------------------------------------------------------------------------

def _all_ready(pods: list[b.Object]) -> bool:
    return bool(pods) and all(_true(p, "Ready") for p in pods)


def _operator_ready(ctx: Context, operator: b.Operator) -> bool:
    return _all_ready(operator.pods(ctx.bed))


async def restart(ctx: Context, operator: b.Operator) -> Figures:
    """N Ready Stacks, then the operator's pod deleted: until the new one has reconciled every Stack (all still
    Ready), how many updates ran again (should be none) and what the API server was asked meanwhile."""
    namespace = await new_namespace(ctx.kc, ctx.bed, "restart")
    try:
        await _fleet_ready(ctx, operator, namespace, ctx.stacks, "before the restart")
        updates_before = len(await b.updates_in(ctx.kc, namespace))
        user = operator.username(ctx.bed)
        old = {p["metadata"]["uid"] for p in operator.pods(ctx.bed)}
        with b.CostMeter(ctx.bed, operator) as cost, b.wall_window() as window:
            start = time.monotonic()
            ctx.bed.kubectl("delete", "pods", "-n", operator.namespace, "--all", "--wait=false")
            back = None
            deadline = start + 600
            while time.monotonic() < deadline:
                pods = operator.pods(ctx.bed)
                fresh = [p for p in pods if p["metadata"]["uid"] not in old]
                if fresh and _operator_ready(ctx, operator):
                    if back is None:
                        back = time.monotonic() - start
                    try:
                        seen = crossrun.reconciles(ctx.bed, operator.namespace, "stack-controller")
                    except OSError:
                        seen = 0.0
                    if seen >= ctx.stacks:
                        stacks = (await ctx.kc.list(resources.STACK, namespace)).items
                        if all(b.is_ready(s) for s in stacks):
                            break
                await asyncio.sleep(b.POLL)
            else:
                raise TimeoutError(f"the new operator did not reconcile every Stack in 600s\n"
                                   f"{diagnose(ctx.bed, operator.namespace)}")
            caught_up = time.monotonic() - start
        reruns = len(await b.updates_in(ctx.kc, namespace)) - updates_before
        return {"all reconciled (s)": caught_up, "operator Ready (s)": back or caught_up,
                "updates re-run": float(reruns),
                "API requests": float(b.api_requests(ctx.bed, user, window[0], window[1])),
                "operator CPU (s)": cost.cpu_seconds}
    finally:
        await b.empty_namespace(ctx.kc, ctx.bed, namespace)


# ---------------------------------------------------------------------------------------------------------------

def pko_agent() -> Path:
    """pko's agent executable for the current sources (tools/agent-bin/build.sh reuses its cached build)."""
    build = subprocess.run(["bash", str(ROOT / "tools" / "agent-bin" / "build.sh")], capture_output=True,
                           text=True, check=False, timeout=1800)
    if build.returncode != 0:
        raise RuntimeError(f"building pko's agent executable failed:\n{build.stderr[-4000:]}")
    return Path(build.stdout.strip().splitlines()[-1])


def _agent_listening(operator: b.Operator, runs: int) -> float:
    """The operator's own agent, here on this machine: exec of `agent serve` to its port accepting (median)."""
    from bench import agent_startup  # a script module of its own; only this figure needs it

    path = pko_agent() if operator.name == "pko" else binaries.require("pko-go-agent")
    with tempfile.TemporaryDirectory(prefix="pko-bench-") as tmp:
        root = Path(tmp)
        env = pulumi.pulumi_env(root / "pulumi")
        workspace = root / "workspace"
        workspace.mkdir()
        (workspace / "Pulumi.yaml").write_text("name: startup\nruntime: yaml\n")
        figures = [agent_startup.time_listening([str(path), "serve", "-w", str(workspace), "--skip-install",
                                                 "--host", "127.0.0.1"], env, root / f"serve-{i}.log")
                   for i in range(runs + 1)][1:]
    return statistics.median(figures)


async def startup(ctx: Context, operator: b.Operator) -> Figures:
    """The agent's exec→listening, and a workspace pod's creation→Ready and a new Stack's creation→Ready, one Stack
    at a time (`changes` of them)."""
    listening = await asyncio.to_thread(_agent_listening, operator, max(3, ctx.changes))
    pod_ready: list[float] = []
    stack_ready: list[float] = []
    failed_dials = 0
    for round_ in range(ctx.changes):
        namespace = await new_namespace(ctx.kc, ctx.bed, "startup")
        try:
            await b.create_program_stacks(ctx.kc, namespace, ["s000"], workload=ctx.workload)
            start = time.monotonic()
            created = ready = None
            while time.monotonic() < start + 300:
                pod = ctx.bed.api_get(f"/api/v1/namespaces/{namespace}/pods/s000-workspace-0")
                now = time.monotonic() - start
                if pod is not None and created is None:
                    created = now
                if pod is not None and any(c.get("type") == "Ready" and c.get("status") == "True"
                                           for c in pod.get("status", {}).get("conditions", [])):
                    ready = now
                    break
                await asyncio.sleep(0.1)
            if created is None or ready is None:
                raise TimeoutError(f"the workspace pod was not Ready in 300s\n{diagnose(ctx.bed, namespace)}")
            pod_ready.append(ready - created)
            done = await b.watch_ready(ctx.kc, ctx.bed, namespace, ["s000"], start, timeout=300)
            stack_ready.append(done["s000"])
            failed_dials += sum(1 for kind, reason, _ in crossrun.events(ctx.bed, namespace)
                                if reason == "ConnectionFailure")
            ctx.say(f"  [{operator.name}] round {round_ + 1}/{ctx.changes}: pod Ready {pod_ready[-1]:.2f}s, "
                    f"Stack Ready {stack_ready[-1]:.2f}s")
        finally:
            await b.empty_namespace(ctx.kc, ctx.bed, namespace)
    return {"agent exec→listening (s)": listening, "pod created→Ready p50 (s)": b.percentile(pod_ready, 0.5),
            "Stack created→Ready p50 (s)": b.percentile(stack_ready, 0.5),
            "failed first dials": float(failed_dials)}


# ---------------------------------------------------------------------------------------------------------------

def _workspace_rss(ctx: Context, namespace: str) -> list[int]:
    found = (b.pod_rss_bytes(p["metadata"]["uid"]) for p in b.pods(ctx.bed, namespace, b.WORKSPACE_PODS))
    return [rss for rss in found if rss is not None]


REQUEST_ANNOTATION = "pulumi.com/reconciliation-request"
SLEEP_AFTER = "5s"  # pko's scale-to-zero timeout in the idle scenario's second half


async def _request_to_ready(ctx: Context, namespace: str, name: str, token: str) -> float:
    """Seconds from a reconciliation request on Stack `name` to it being Ready with an update for that request."""
    start = time.monotonic()
    await ctx.kc.patch(resources.STACK, name, {"metadata": {"annotations": {REQUEST_ANNOTATION: token}}}, namespace)
    while time.monotonic() < start + 300:
        stack = await ctx.kc.get(resources.STACK, name, namespace)
        last = (stack.get("status") or {}).get("lastUpdate") or {}
        if last.get("reconcileRequest") == token and b.is_ready(stack):
            return time.monotonic() - start
        await asyncio.sleep(0.1)
    raise TimeoutError(f"request {token} on {name} was not deployed in 300s\n{diagnose(ctx.bed, namespace)}")


async def _all_sleeping(ctx: Context, namespace: str, count: int) -> None:
    deadline = time.monotonic() + 300 + 10 * count
    while time.monotonic() < deadline:
        workspaces = (await ctx.kc.list(resources.WORKSPACE, namespace)).items
        sleeping = sum(1 for w in workspaces if any(
            c.get("type") == "Ready" and c.get("status") == "True" and c.get("reason") == "Sleeping"
            for c in (w.get("status") or {}).get("conditions") or []))
        if sleeping == count and b.count_pods(ctx.bed, namespace, b.WORKSPACE_PODS) == 0:
            return
        await asyncio.sleep(1)
    raise TimeoutError(f"the workspaces did not all sleep\n{diagnose(ctx.bed, namespace)}")


async def _scale_to_zero(ctx: Context, operator: b.Operator, namespace: str) -> Figures:
    """pko only (the Go operator has no scale-to-zero): the cost of a sleeping fleet and of waking one Stack.
    A warm Stack's reconciliation request → Ready first; then every Stack gets `workspaceIdleTimeout` (a spec
    change: one update each), the fleet falls asleep (no pods), and one Stack is asked again, cold."""
    names = [f"s{i:03d}" for i in range(ctx.stacks)]
    warm = await _request_to_ready(ctx, namespace, names[0], "warm")
    for name in names:
        await ctx.kc.patch(resources.STACK, name, {"spec": {"workspaceIdleTimeout": SLEEP_AFTER}}, namespace)
    ctx.say(f"  [{operator.name}] waiting for {len(names)} workspaces to sleep")
    await _all_sleeping(ctx, namespace, len(names))
    with b.CostMeter(ctx.bed, operator) as cost:
        await asyncio.sleep(min(10.0, ctx.idle_seconds))
        asleep = sum(_workspace_rss(ctx, namespace))  # no pods: 0
    cold = await _request_to_ready(ctx, namespace, names[0], "cold")
    ctx.say(f"  [{operator.name}] request→Ready: warm {warm:.1f}s, cold (waking its workspace) {cold:.1f}s")
    return {"asleep: workspace pods RSS total (MB)": asleep / 1e6, "asleep: operator RSS (MB)": cost.mean_rss / 1e6,
            "warm request→Ready (s)": warm, "cold request→Ready (s)": cold}


async def idle(ctx: Context, operator: b.Operator) -> Figures:
    """N Ready Stacks left alone: the operator's CPU and RSS over `idle_seconds`, the workspace pods' RSS (each
    agent at rest), and the API requests the operator made while nothing changed. Then, for pko, the same fleet
    asleep (scale-to-zero) and the cost of waking one of its Stacks (:func:`_scale_to_zero`)."""
    namespace = await new_namespace(ctx.kc, ctx.bed, "idle")
    try:
        await _fleet_ready(ctx, operator, namespace, ctx.stacks, "settling")
        await asyncio.sleep(min(10.0, ctx.idle_seconds))
        user = operator.username(ctx.bed)
        ctx.say(f"  [{operator.name}] idle for {ctx.idle_seconds:.0f}s")
        samples: list[list[int]] = []
        with b.CostMeter(ctx.bed, operator) as cost, b.wall_window() as window:
            end = time.monotonic() + ctx.idle_seconds
            while time.monotonic() < end:
                samples.append(_workspace_rss(ctx, namespace))
                await asyncio.sleep(min(5.0, ctx.idle_seconds / 3))
        per_pod = [rss for sample in samples for rss in sample]
        totals = [sum(sample) for sample in samples if sample]
        figures = {"operator CPU (s)": cost.cpu_seconds, "operator RSS (MB)": cost.mean_rss / 1e6,
                   "workspace pods RSS total (MB)": statistics.fmean(totals) / 1e6 if totals else float("nan"),
                   "workspace pod RSS (MB)": statistics.fmean(per_pod) / 1e6 if per_pod else float("nan"),
                   "API requests": float(b.api_requests(ctx.bed, user, window[0], window[1]))}
        if operator.name == "pko":
            figures |= await _scale_to_zero(ctx, operator, namespace)
        return figures
    finally:
        await b.empty_namespace(ctx.kc, ctx.bed, namespace)


async def _pod_to_update(ctx: Context, namespace: str) -> tuple[float | None, float | None]:
    """Seconds from the namespace's first workspace pod's creation to the start and to the end of its first Update
    (1 s steps): the start is the pod's fetch, agent start and install; the rest is the update itself."""
    pods = (await ctx.kc.list(resources.POD, namespace)).items
    created = min((t for p in pods if (t := _ts(p["metadata"]["creationTimestamp"])) is not None), default=None)
    updates = await b.updates_in(ctx.kc, namespace)
    starts = [t for u in updates if (t := _ts((u.get("status") or {}).get("startTime")))]
    ends = [t for u in updates if (t := _ts((u.get("status") or {}).get("endTime")))]
    return (_span(created, min(starts)) if starts else None), (_span(created, min(ends)) if ends else None)


#: What pko's agent logs at each step of a workspace's start, in order: the figure each one ends.
AGENT_MARKS = (
    ("pod→agent start (s)", ("Pulumi Kubernetes Agent",)),
    ("pod→agent listening (s)", ("server listening on",)),
    ("pod→Install asked (s)", ("installing the project dependencies",)),
    ("pod→installed (s)", ("installation completed",)),
    ("pod→up started (s)", ("up: kept running as operation", "Updating (")),
)


def agent_timeline(created: float, log: str) -> Figures:
    """Seconds from a workspace pod's creation (its `creationTimestamp`: 1 s resolution) to each of
    :data:`AGENT_MARKS` in its `pulumi` container's log (``kubectl logs --timestamps``: each line starts with the
    time it was written, to the nanosecond); a mark the log lacks (another operator's agent) gives no figure."""
    found: Figures = {}
    for line in log.splitlines():
        stamp, _, text = line.partition(" ")
        for name, needles in AGENT_MARKS:
            if name not in found and any(needle in text for needle in needles):
                when = _ts(stamp[:26].rstrip("Z") + "Z" if "." in stamp else stamp)  # to the microsecond
                if when is not None:
                    found[name] = when - created
    return found


async def _agent_timeline(ctx: Context, namespace: str) -> Figures:
    pods = [p for p in (await ctx.kc.list(resources.POD, namespace)).items
            if p["metadata"]["name"].endswith("-workspace-0")]
    if not pods:
        return {}
    pod = pods[0]
    created = _ts(pod["metadata"]["creationTimestamp"])
    logs = await asyncio.to_thread(ctx.bed.kubectl, "logs", pod["metadata"]["name"], "-c", "pulumi", "-n",
                                   namespace, "--timestamps", check=False)
    if created is None:
        return {}
    found = agent_timeline(created, logs.stdout)
    if found:  # pko's agent: the install scripts of the tree it left to the CLI's plugin step, or known to do nothing
        found["install scripts not run"] = float(logs.stdout.count("not running the install scripts of"))
    return found


async def coldstart(ctx: Context, operator: b.Operator) -> Figures:
    """A Stack's first and second cold start on the node: one Stack until Ready, then a Stack of the same program in
    another namespace (nothing shared with the first but the node and the operator). For each: Stack created →
    Ready, workspace pod created → first Update done, and (realistic program) the plugin and npm megabytes its pod
    pulled from the mirrors, which pko's dependency cache should bring to 0 the second time (with `--plugin-images`,
    the plugins' image layers the node pulled: the node starts without them, and keeps them for the second)."""
    figures: Figures = {}
    namespaces: list[str] = []
    if ctx.workload is not None:
        ctx.workload.fresh_node(ctx.bed)
    try:
        for which in ("first", "second"):
            namespace = await new_namespace(ctx.kc, ctx.bed, "cold")
            namespaces.append(namespace)
            plugins = ctx.workload.plugin_megabytes() if ctx.workload is not None else 0.0
            npm = ctx.workload.npm_megabytes() if ctx.workload is not None else 0.0
            pulled = ctx.workload.plugin_image_megabytes() if ctx.workload is not None else 0.0
            start = time.monotonic()
            await b.create_program_stacks(ctx.kc, namespace, ["s000"], workload=ctx.workload)
            done = await b.watch_ready(ctx.kc, ctx.bed, namespace, ["s000"], start, timeout=600)
            figures[f"{which} cold start: Stack→Ready (s)"] = done["s000"]
            to_start, to_done = await _pod_to_update(ctx, namespace)
            if to_start is not None:
                figures[f"{which} cold start: pod→Update start (s)"] = to_start
            if to_done is not None:
                figures[f"{which} cold start: pod→Update done (s)"] = to_done
            for name, seconds in (await _agent_timeline(ctx, namespace)).items():
                figures[f"{which} cold start: {name}"] = seconds
            if ctx.workload is not None:
                figures[f"{which} cold start: plugin MB from the mirror"] = ctx.workload.plugin_megabytes() - plugins
                figures[f"{which} cold start: npm MB from the mirror"] = ctx.workload.npm_megabytes() - npm
                figures[f"{which} cold start: plugin image MB pulled"] = ctx.workload.plugin_image_megabytes() - pulled
            ctx.say(f"  [{operator.name}] {which} cold start: Ready in {done['s000']:.1f}s")
        figures["second ÷ first (Stack→Ready)"] = (figures["second cold start: Stack→Ready (s)"]
                                                   / figures["first cold start: Stack→Ready (s)"])
        return figures
    finally:
        for namespace in namespaces:
            await b.empty_namespace(ctx.kc, ctx.bed, namespace)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("fleet", "all Ready (s)", True, fleet),
    Scenario("concurrency", "all succeeded (s)", True, concurrency, needs_git=True),
    Scenario("latency", "change→Update p50 (s)", True, latency),
    Scenario("restart", "all reconciled (s)", True, restart, disturbs_operator=True),
    Scenario("killed", "all Ready after the kill (s)", True, killed, needs_git=True, disturbs_operator=True),
    Scenario("startup", "agent exec→listening (s)", True, startup),
    Scenario("idle", "workspace pods RSS total (MB)", True, idle),
    Scenario("coldstart", "second cold start: Stack→Ready (s)", True, coldstart),
)}
