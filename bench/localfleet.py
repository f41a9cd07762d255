"""`python -m bench fleet --runtime local --operators pko`: the fleet scenario on pko's `local` workspace runtime,
where every workspace agent is a process on the operator's machine instead of a pod. The Go operator has no such
runtime, so this measures pko alone: how large a fleet one machine converges, and at what cost.

It runs on a local control plane (etcd + kube-apiserver, no kubelet) with the operator in a process of its own
(:mod:`bench.operatorproc`: the manager and controllers `pko dev` runs), so its CPU and peak RSS are the operator's
alone, read from ``/proc``; the agents are its children, and their memory is summed over their processes. The
harness's own CPU is reported beside it.

The fleet's time is set beside its physical floor, measured in the same run on the same machine: the Pulumi CLI's
own CPU for the reference's sequence for one Stack (``stack select --create``, ``config set-all``, ``up`` of the same
program on the same backend, the language host included), run for a few Stacks one after the other, times the
fleet's size, divided by the cores. No operator converges a fleet faster than its CLI processes can run. The CLI's
cost varies by a third from day to day on a shared machine, so a floor measured on another day says little; and it
grows with the stacks the backend holds (1.35 CPU s a Stack on an empty file backend, 1.62 beside 1,000 others, on
2026-12-04), so the sequence runs before the fleet (an empty backend) and after it (the whole fleet's stacks) and
the floor takes the mean: the fleet's Stacks were made while the backend grew from one to the other.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

from bench import bed as b
from bench import operatorproc, proctree, statuspaths
from bench.proctree import children, cpu, rss
from pko.api import program as program_api
from pko.kube import client as kclient
from pko.kube import resources
from pko.runtime import ports
from pko.sources import program as program_source
from pko.testing import controlplane, pulumi
from pko.testing import operator as local_operator

NAMESPACE = "fleet"
#: Stacks of the floor's sequence, one after the other (the median is taken: the first may find a cold page cache).
FLOOR_STACKS = 5
#: The operator's User-Agent: it shares the harness's account, so the audit log tells its requests apart by this.
USER_AGENT = "pko-bench-operator"


class OperatorProcess:
    """A running :mod:`bench.operatorproc`: its pid, and how many Stacks it has verified since its start."""

    def __init__(self, process: asyncio.subprocess.Process, status: Path, log: Path) -> None:
        self.process = process
        self.pid = process.pid
        self.status = status
        self.log = log

    def _status(self) -> dict[str, Any] | None:
        if self.process.returncode is not None:
            raise RuntimeError(f"the operator exited ({self.process.returncode}); the end of {self.log}:\n"
                               + self.log.read_text(errors="replace")[-4000:])
        return operatorproc.read_status(self.status)

    def verified(self) -> int:
        found = self._status()
        return int(found["verified"]) if found else -1

    async def reconciles(self, timeout: float = 30.0) -> dict[str, float]:
        """Reconciles so far by controller (the operator's ``controller_runtime_reconcile_total``): asked for with
        SIGUSR1 (the operator counts them only then) and read once its answer is in the status file."""
        before = self._status()
        answered = int(before.get("asked", 0)) if before else 0
        self.process.send_signal(signal.SIGUSR1)
        until = time.monotonic() + timeout
        while True:
            found = self._status()
            if found is not None and int(found.get("asked", 0)) > answered:
                return dict(found.get("reconciles", {}))
            if time.monotonic() > until:
                raise RuntimeError(f"the operator did not count its reconciles within {timeout:g}s")
            await asyncio.sleep(0.05)

    def started(self) -> tuple[float, float]:
        """When the operator began to start: the wall clock (``time.time``) and its own CPU seconds then."""
        found = self._status()
        if found is None:
            raise RuntimeError("the operator has not said it runs")
        return float(found["started"]), float(found["cpu"])


def program_fs_address(root: Path) -> str:
    """The Program file server's address of every operator of one run (a free port, chosen once): a new operator
    advertises what the last did, as a deployed one does (its Service), so a restart finds every Program's artifact
    URL current and writes no Program status (a new port each time made it write all of them)."""
    chosen = root / "program-fs.addr"
    if not chosen.exists():  # below the ephemeral range: no client's connection takes it between the two operators
        chosen.write_text(f"127.0.0.1:{ports.free_port()}")
    return chosen.read_text()


@contextlib.asynccontextmanager
async def operator_process(kubeconfig: Path, root: Path, name: str, pool: int | None,
                           timeout: float = 120.0) -> AsyncIterator[OperatorProcess]:
    """The operator in a process of its own (this process's environment: the fleet's Pulumi backend and CLI),
    running once it has said so; stopped with SIGTERM (its agents with it) when the block ends."""
    config = root / f"{name}.json"
    status, log = root / f"{name}.status.json", root / f"{name}.log"
    config.write_text(json.dumps({"kubeconfig": str(kubeconfig), "workspace_root": str(root / f"{name}-workspaces"),
                                  "namespace": NAMESPACE, "max_active_workspaces": pool,
                                  "user_agent": USER_AGENT, "status": str(status),
                                  "program_fs_addr": program_fs_address(root)}))
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(sys.executable, "-m", "bench.operatorproc", str(config),
                                                       stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    op = OperatorProcess(process, status, log)
    try:
        deadline = time.monotonic() + timeout
        while op.verified() < 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the operator did not start within {timeout:.0f}s (see {log})")
            await asyncio.sleep(0.1)
        yield op
    except BaseException:
        await _stop(process, timeout)
        raise
    if await _stop(process, timeout) != 0:
        raise RuntimeError(f"the operator's shutdown failed ({process.returncode}); the end of {log}:\n"
                           + log.read_text(errors="replace")[-4000:])


async def _stop(process: asyncio.subprocess.Process, timeout: float) -> int:
    """SIGTERM, then SIGKILL if it is still there after `timeout` seconds; its exit status."""
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout)
        except TimeoutError:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """The Pulumi environment the local agents inherit (as the e2e tests give it to them)."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


async def run(stacks: int, say: Callable[[str], None] = print, pool: int | None = None,
              restart: bool = False, status_paths: bool = False) -> dict[str, float]:
    """N Program Stacks applied at once to pko with the local runtime: time to all Ready, p50/p95, CPU, RSS, and
    the most agents that ran at once (`pool`: --max-active-workspaces). With `restart`, then a second operator
    takes over the Ready fleet: the time until it has verified every Stack, its CPU, and the updates that ran
    again (should be none). With `status_paths`, the harness also follows every Stack and Workspace and prints
    the commonest paths through their statuses (:mod:`bench.statuspaths`)."""
    with tempfile.TemporaryDirectory(prefix="pko-bench-local-") as tmp:
        root = Path(tmp)
        plane = await asyncio.to_thread(controlplane.start, root / "control-plane",
                                        audit_log=root / "audit" / "audit.log")
        try:
            with _environment(pulumi.pulumi_env(root / "pulumi")):
                return await _fleet(plane, root, stacks, say, pool, restart, status_paths)
        finally:
            await asyncio.to_thread(plane.stop)


async def _fleet(plane: controlplane.ControlPlane, root: Path, stacks: int, say: Callable[[str], None],
                 pool: int | None, restart: bool, status_paths: bool = False) -> dict[str, float]:
    async with kclient.Client.from_kubeconfig(plane.kubeconfig) as kc:
        await local_operator.install_crds(kc)
        await local_operator.install_identity(kc)
        await local_operator.ensure_namespace(kc, NAMESPACE)
        names = [f"s{i:03d}" for i in range(stacks)]
        last = [-1]

        def progress(done: int, total: int) -> None:
            if done != last[0]:
                last[0] = done
                say(f"  [pko local] fleet: {done}/{total} Ready")

        say(f"  [pko local] floor: the reference's CLI sequence for {FLOOR_STACKS} Stacks on the empty backend")
        floor_before = await asyncio.to_thread(floor_cpu, root / "floor", "before")
        async with operator_process(plane.kubeconfig, root, "operator", pool) as op:
            sampled = root / "procwatch.json"
            watcher = await asyncio.create_subprocess_exec(sys.executable, "-m", "bench.procwatch", str(op.pid),
                                                           str(sampled))
            waited = time.monotonic() + 60
            while proctree.read_json(sampled) is None:  # sampling before the fleet starts
                if watcher.returncode is not None or time.monotonic() > waited:
                    raise RuntimeError(f"bench.procwatch did not start sampling ({watcher.returncode})")
                await asyncio.sleep(0.05)
            paths, following = statuspaths.Paths(), []
            if status_paths:
                version = (await kc.list(resources.STACK, NAMESPACE)).resource_version
                following = [asyncio.create_task(statuspaths.follow(kc, NAMESPACE, kind, version, paths))
                             for kind in statuspaths.KINDS]
            used, harness = cpu(op.pid), time.process_time()
            start, since = time.monotonic(), time.time()
            try:
                await b.create_program_stacks(kc, NAMESPACE, names, local=True)
                done = await b.watch_ready(kc, None, NAMESPACE, names, start, timeout=600 + 10 * len(names),
                                           progress=progress)
            finally:
                used, harness = cpu(op.pid) - used, time.process_time() - harness
                watcher.terminate()
                await watcher.wait()
                for task in following:
                    task.cancel()
                await asyncio.gather(*following, return_exceptions=True)
            for kind in statuspaths.KINDS if status_paths else ():
                say(f"  [pko local] fleet: {kind} status writes {paths.writes(kind) / len(names):.1f} a Stack, "
                    "the commonest paths: " + "; ".join(f"{path} ({n})" for path, n in paths.most_common(kind)))
            at_rest, peak = rss(op.pid), rss(op.pid, "VmHWM")
            seen = proctree.read_json(sampled) or {"peak_rss": 0, "most_agents": 0}
            requests = _requests(root, since, time.time(), len(names), "fleet", say)
            requests |= _reconciles(await op.reconciles(), len(names), "fleet", say)
            await _events(kc, say)
            say(f"  [pko local] floor: the reference's CLI sequence for {FLOOR_STACKS} Stacks beside the fleet")
            floor_after = await asyncio.to_thread(floor_cpu, root / "floor", "after")
            agents = sum(rss(pid) for pid in children(op.pid))
            if not restart:
                for name in names:
                    await kc.delete(resources.STACK, name, NAMESPACE)
        again = await _restart(kc, plane, root, names, say, pool) if restart else {}
        times = list(done.values())
        floor = against_floor(max(times), floor_before, floor_after, len(names), cores(), used)
        return again | requests | floor | {"all Ready (s)": max(times), "Stack Ready p50 (s)": b.percentile(times, 0.5),
                "Stack Ready p95 (s)": b.percentile(times, 0.95), "operator CPU (s)": used,
                "harness CPU (s)": harness, "operator peak RSS (MB)": peak / 1e6,
                "operator peak RSS reached after (s)": float(seen.get("own_peak_at", 0.0)),
                "operator RSS when all Ready (MB)": at_rest / 1e6,
                "agents RSS at rest (MB)": agents / 1e6, "agents peak RSS (MB)": seen["peak_rss"] / 1e6,
                "most agents at once": float(seen["most_agents"])}


async def _restart(kc: kclient.Client, plane: controlplane.ControlPlane, root: Path, names: list[str],
                   say: Callable[[str], None], pool: int | None) -> dict[str, float]:
    """A second operator takes over the Ready fleet (the first one is gone, and its agents with it)."""
    before = len(await b.updates_in(kc, NAMESPACE))
    say(f"  [pko local] restart: a new operator takes over {len(names)} Ready Stacks")
    async with operator_process(plane.kubeconfig, root, "operator-2", pool) as op:
        since, used = op.started()  # from its start: a small fleet is verified before the harness looks
        deadline = time.monotonic() + 600 + len(names)
        while op.verified() < len(names):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the new operator verified {op.verified()} of {len(names)} Stacks")
            await asyncio.sleep(0.1)
        took = time.time() - since
        used = cpu(op.pid) - used
        requests = _requests(root, since, time.time(), len(names), "restart", say)
        requests |= _reconciles(await op.reconciles(), len(names), "restart", say)
        reruns = len(await b.updates_in(kc, NAMESPACE)) - before
        ready = sum(1 for s in (await kc.list(resources.STACK, NAMESPACE)).items if b.is_ready(s))
        for name in names:
            await kc.delete(resources.STACK, name, NAMESPACE)
    return {f"restart: {k}": v for k, v in requests.items()} | {
        "restart: all verified (s)": took, "restart: operator CPU (s)": used,
        "restart: updates re-run": float(reruns), "restart: Ready after": float(ready)}


def _reconciles(counts: dict[str, float], stacks: int, phase: str, say: Callable[[str], None]) -> dict[str, float]:
    """The operator's reconciles a Stack, all controllers together, and each controller's said."""
    say(f"  [pko local] {phase}: the operator's reconciles a Stack, most first: "
        + ", ".join(f"{name} {n / stacks:.1f}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1])))
    return {"reconciles per Stack": sum(counts.values()) / stacks}


def floor_sequence(name: str) -> list[list[str]]:
    """The reference's CLI commands for one new Stack of the benchmark's program."""
    return [["pulumi", "stack", "select", "--create", "--stack", "dev", "--non-interactive"],
            ["pulumi", "config", "set-all", "--plaintext", f"{name}:greeting=hello", "--stack", "dev"],
            ["pulumi", "up", "--yes", "--skip-preview", "--stack", "dev", "--non-interactive"]]


def floor_project(name: str) -> bytes:
    """The Pulumi.yaml the operator serves for the benchmark's Program named `name` (:mod:`pko.sources.program`):
    the floor runs the very program the fleet's Stacks run."""
    program = program_api.Program.model_validate(resources.PROGRAM.new(name, NAMESPACE, program=b.PROGRAM))
    return program_source.render(program_source.project(program))


def _cpu_of(argv: list[str], cwd: Path) -> float:
    """Run `argv`; the CPU seconds it and the processes it waited for took (``wait4``: the CLI with its language
    host), whatever else this process runs meanwhile."""
    process = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    assert process.stderr is not None
    errors_ = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({process.returncode}): {errors_.decode(errors='replace')}")
    return usage.ru_utime + usage.ru_stime


def floor_cpu(root: Path, prefix: str, stacks: int = FLOOR_STACKS) -> float:
    """The median CPU seconds of the reference's sequence for one new Stack (:func:`floor_sequence`), under this
    process's environment (the fleet's backend and CLI), for `stacks` new projects named after `prefix`. Blocking."""
    per_stack = []
    for i in range(stacks):
        name = f"floor-{prefix}-{i:02d}"
        workdir = root / name
        workdir.mkdir(parents=True)
        (workdir / "Pulumi.yaml").write_bytes(floor_project(name))
        per_stack.append(sum(_cpu_of(argv, workdir) for argv in floor_sequence(name)))
    return statistics.median(per_stack)


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) or 1


def against_floor(all_ready: float, before: float, after: float, stacks: int, cores_: int,
                  operator_cpu: float = 0.0) -> dict[str, float]:
    """The floor's figures: the CLI's CPU a Stack before and after the fleet, the floor (their mean for every Stack,
    spread over the cores), and the fleet's time over it; the operator's CPU a Stack, and that as a share of the
    CLI's (measured in the same run, on the same machine: what compares across VMs whose speed differs)."""
    cli = (before + after) / 2
    floor = cli * stacks / cores_
    per_stack = operator_cpu / stacks if stacks else 0.0
    return {"floor: CLI CPU a Stack, empty backend (s)": before, "floor: CLI CPU a Stack, after the fleet (s)": after,
            "floor (s)": floor, "all Ready over the floor": all_ready / floor if floor > 0 else 0.0,
            "operator CPU a Stack (ms)": per_stack * 1000,
            "operator CPU a Stack over the CLI's (%)": 100 * per_stack / cli if cli > 0 else 0.0}


async def _events(kc: kclient.Client, say: Callable[[str], None]) -> None:
    """The fleet's events by kind and reason, most first (what a change to what reconcilers post moves), each as
    often as it was told (an Event told again is one object with a count)."""
    found: collections.Counter[str] = collections.Counter()
    for e in (await kc.list(resources.EVENT, NAMESPACE)).items:
        found[f"{(e.get('involvedObject') or {}).get('kind', '?')} {e.get('reason', '?')}"] += int(e.get("count") or 1)
    say("  [pko local] fleet: events by kind and reason, most first: "
        + ", ".join(f"{what} {n}" for what, n in found.most_common(12)))


def _requests(root: Path, since: float, until: float, stacks: int, phase: str,
              say: Callable[[str], None]) -> dict[str, float]:
    """The operator's API requests and writes per Stack in [since, until] (from the API server's audit log), and
    the kinds that made most of them (what a change to a reconciler's writes moves)."""
    found = b.audit_breakdown(root / "audit" / "audit.log", since, until, user_agent=USER_AGENT)
    writes = sum(n for what, n in found.items() if what.split(" ")[0] in b.WRITES)
    say(f"  [pko local] {phase}: the operator's requests, most first: "
        + ", ".join(f"{what} {n}" for what, n in found.most_common(8)))
    return {"API requests per Stack": sum(found.values()) / stacks, "API writes per Stack": writes / stacks}
