"""The operator SIGKILLed on the `pod` runtime (docs/reliability.md): its container killed by containerd at three
moments of a round of changes over a fleet of workspace pods — right after the Stacks changed (sources and
Workspaces being worked out), while their `up`s run in the workspace pods, and as the first Updates complete (the
status writes) — and its pod then replaced, so the next one waits for the dead leader's Lease to expire.

After each round every Stack is Ready at its new generation with that generation's output. At the end, read on the
node from each workspace pod's `share` volume (where its file backend lives): no round's `up` succeeded twice for
a Stack, no lock is left; and every Stack kept its finalizer, its one workspace pod (the same pod throughout: config
changes apply in place, and an operator's restart rolls nothing) and nothing else.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pko.kube import client as kclient
from pko.kube import objects, resources
from pko.testing import cluster, filebackend
from pko.testing.clusterbed import OPERATOR_NAMESPACE, Release, diagnose, passphrase_env, workspace_template
from pko.testing.waiting import condition, eventually

STACKS = 4
FINALIZER = "finalizer.stack.pulumi.com"


def _stack(name: str, namespace: str, round_: int) -> dict[str, Any]:
    return resources.STACK.new(name, namespace, spec={
        "stack": "dev", "programRef": {"name": name}, "backend": "file:///share", "envRefs": passphrase_env(),
        "config": {"round": str(round_)}, "destroyOnFinalize": True, "workspaceTemplate": workspace_template(),
    })


def _converged(obj: dict[str, Any], round_: int) -> bool:
    status = obj.get("status") or {}
    return (condition(obj, "Ready").get("status") == "True"
            and status.get("observedGeneration") == obj["metadata"]["generation"]
            and (status.get("lastUpdate") or {}).get("generation") == obj["metadata"]["generation"]
            and str((status.get("outputs") or {}).get("round")) == str(round_))


def _share(real_cluster: cluster.Cluster, pod: dict[str, Any]) -> Path:
    volumes = real_cluster.paths.kubelet_root / "pods" / str(pod["metadata"]["uid"]) / "volumes"
    return volumes / "kubernetes.io~empty-dir" / "share"


async def _kill_operator(ckc: kclient.Client, real_cluster: cluster.Cluster) -> str:
    """SIGKILL the operator's manager container (no shutdown, no Lease released), then replace its pod."""
    pods = [p for p in (await ckc.list(resources.POD, OPERATOR_NAMESPACE)).items
            if not p["metadata"].get("deletionTimestamp") and p["status"].get("containerStatuses")]
    assert len(pods) == 1, [objects.name_of(p) for p in pods]
    pod = pods[0]
    status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == "manager")
    real_cluster.ctr("task", "kill", "--signal", "SIGKILL", str(status["containerID"]).removeprefix("containerd://"))
    real_cluster.kubectl("delete", "pod", "-n", OPERATOR_NAMESPACE, objects.name_of(pod), "--grace-period=0",
                         "--force", "--wait=false")
    return objects.name_of(pod)


async def test_operator_sigkill_rounds_on_the_pod_runtime(ckc: kclient.Client, cnamespace: str,
                                                          real_cluster: cluster.Cluster,
                                                          operator_release: Release) -> None:
    ns = cnamespace
    names = [f"k{index}" for index in range(STACKS)]
    for name in names:
        await ckc.create(resources.PROGRAM.new(name, ns, program={
            "configuration": {"round": {"type": "String"}}, "outputs": {"round": "${round}"}}))
        await ckc.create(_stack(name, ns, 0))

    async def stacks() -> list[dict[str, Any]]:
        return [o for o in (await ckc.list(resources.STACK, ns)).items if objects.name_of(o) in names]

    async def wait_round(round_: int, timeout: float) -> None:
        async def done() -> bool:
            return sum(1 for o in await stacks() if _converged(o, round_)) == STACKS
        try:
            await eventually(done, f"{STACKS} Stacks Ready at round {round_}", timeout, interval=0.5)
        except AssertionError as err:
            left = {objects.name_of(o): (o.get("status") or {}) for o in await stacks() if not _converged(o, round_)}
            raise AssertionError(f"{err}\n{json.dumps(left, indent=1)[:5000]}\n{diagnose(real_cluster, ns)}") from None

    await wait_round(0, 600)
    pods = {name: await ckc.get(resources.POD, f"{name}-workspace-0", ns) for name in names}

    async def updates_running() -> bool:
        return any(condition(u, "Progressing").get("status") == "True"
                   for u in (await ckc.list(resources.UPDATE, ns)).items)

    def some_converged(round_: int) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            return any(_converged(o, round_) for o in await stacks())
        return check

    seed = random.randrange(1_000_000)
    print(f"operator kill seed: {seed}")
    jitter = random.Random(seed)
    moments: list[tuple[str, Callable[[int], Callable[[], Awaitable[bool]]] | None]] = [
        ("right after the change", None),
        ("while an up runs", lambda _round: updates_running),
        ("as the first Updates complete", some_converged),
    ]
    for round_, (moment, wait) in enumerate(moments, start=1):
        for name in names:
            await ckc.patch(resources.STACK, name, {"spec": {"config": {"round": str(round_)}}}, ns)
        if wait is None:
            await asyncio.sleep(jitter.uniform(0.0, 1.0))
        else:
            await eventually(wait(round_), moment, 180, interval=0.1)
        killed = await _kill_operator(ckc, real_cluster)
        print(f"round {round_}: SIGKILL {killed} {moment}")
        await wait_round(round_, 420)

    duplicated, locked = [], []
    for name in names:
        pod = await ckc.get(resources.POD, f"{name}-workspace-0", ns)
        assert pod["metadata"]["uid"] == pods[name]["metadata"]["uid"], f"{name}: its workspace pod was replaced"
        share = _share(real_cluster, pod)
        ups = filebackend.succeeded_ups(share)
        assert set(ups) >= {"0", "1", "2", "3"}, f"{name}: the backend's history lacks rounds: {dict(ups)}"
        duplicated += [f"{name}: round {r} succeeded {n} times" for r, n in ups.items() if n > 1]
        locked += [f"{name}: {p.name}" for p in filebackend.locks(share)]
    assert not duplicated, duplicated
    assert not locked, locked
    for stack in await stacks():
        assert FINALIZER in (stack["metadata"].get("finalizers") or []), objects.name_of(stack)
    workspace_pods = sorted(objects.name_of(p) for p in (await ckc.list(resources.POD, ns)).items)
    assert workspace_pods == sorted(f"{name}-workspace-0" for name in names), workspace_pods
