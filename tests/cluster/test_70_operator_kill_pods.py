"""The operator SIGKILLed on the `pod` runtime (docs/reliability.md): its container killed by containerd, then its
pod replaced (so the next one waits for the dead leader's Lease to expire), at each moment a fleet of workspace
pods can be caught in:

- during `pulumi install`: the fleet's new workspace pods install the program before their first Update (the kill
  comes while a `pulumi install` process runs in one of them, seen in /proc on the node);
- in the rounds of changes that follow, in an order drawn at random (the seed is printed), each moment once before
  any repeats: right after the Stacks changed (sources and Workspaces being worked out), while their `up`s run in
  the workspace pods, and as the first Updates complete (the status writes);
- while the finalizers' `destroy`s run, once every Stack is deleted.

After each round every Stack is Ready at its new generation with that generation's output. Read on the node from
each Stack's backend directory (a hostPath volume of its workspace pod, so it outlives any pod): no round's `up`
succeeded twice for a Stack and no lock is left; every Stack kept its finalizer, its one workspace pod (the same
pod throughout: config changes apply in place, and an operator's restart rolls nothing) and nothing else; and each
deleted Stack's stack was destroyed, leaving no lock.

`make test` runs 3 rounds over 3 Stacks; ``make soak`` (``PKO_SOAK=1``) 20 rounds over 10 and adds its tally line.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pko.kube import client as kclient
from pko.kube import objects, resources
from pko.testing import cluster, faults, filebackend, podprocs
from pko.testing.clusterbed import OPERATOR_NAMESPACE, Release, RoundFleet
from pko.testing.waiting import at_round, condition, eventually

SOAK = bool(os.environ.get("PKO_SOAK"))
ROUNDS = 20 if SOAK else 3
STACKS = 10 if SOAK else 3
FINALIZER = "finalizer.stack.pulumi.com"
MOMENTS = ("right after the change", "while an up runs", "as the first Updates complete")


async def _kill_operator(ckc: kclient.Client, real_cluster: cluster.Cluster) -> str:
    """SIGKILL the operator's manager container (no shutdown, no Lease released), then replace its pod. The pod the
    last round made may still be creating its container (no containerID yet): its container is waited for."""
    found: list[tuple[dict[str, Any], dict[str, Any]]] = []  # (pod, its manager container's status)

    async def manager_running() -> bool:
        pods = [p for p in (await ckc.list(resources.POD, OPERATOR_NAMESPACE)).items
                if not p["metadata"].get("deletionTimestamp")]
        running = [(p, s) for p in pods for s in (p.get("status") or {}).get("containerStatuses") or []
                   if s.get("name") == "manager" and s.get("containerID") and "running" in (s.get("state") or {})]
        found[:] = running
        return len(pods) == 1 and len(running) == 1

    await eventually(manager_running, "the operator's one pod with its manager container running", 120)
    pod, status = found[0]
    real_cluster.ctr("task", "kill", "--signal", "SIGKILL", str(status["containerID"]).removeprefix("containerd://"))
    real_cluster.kubectl("delete", "pod", "-n", OPERATOR_NAMESPACE, objects.name_of(pod), "--grace-period=0",
                         "--force", "--wait=false")
    return objects.name_of(pod)


async def test_operator_sigkill_rounds_on_the_pod_runtime(ckc: kclient.Client, cnamespace: str,
                                                          real_cluster: cluster.Cluster, operator_release: Release,
                                                          tmp_path: Path) -> None:
    ns = cnamespace
    fleet = await RoundFleet.create(ckc, real_cluster, ns, "k", STACKS, tmp_path)
    names, states, stacks, wait_round = fleet.names, fleet.states, fleet.stacks, fleet.wait_round
    tally = filebackend.Tally()

    async def installing() -> bool:
        uids = {str(p["metadata"]["uid"]) for p in (await ckc.list(resources.POD, ns)).items}
        return bool(uids and await asyncio.to_thread(podprocs.running_command, uids, "install"))

    await eventually(installing, "a `pulumi install` in a new workspace pod", 300, interval=0.05)
    print(f"round 0: SIGKILL {await _kill_operator(ckc, real_cluster)} during `pulumi install` in a workspace pod")
    await wait_round(0, 600 if SOAK else 300)
    pods = {name: await ckc.get(resources.POD, f"{name}-workspace-0", ns) for name in names}

    async def updates_running() -> bool:
        return any(condition(u, "Progressing").get("status") == "True"
                   for u in (await ckc.list(resources.UPDATE, ns)).items)

    def waits(moment: str, round_: int) -> Callable[[], Awaitable[bool]] | None:
        if moment == "while an up runs":
            return updates_running
        if moment == "as the first Updates complete":
            async def some_converged() -> bool:
                return any(at_round(o, round_) for o in await stacks())
            return some_converged
        return None

    seed = int(os.environ.get("PKO_CHAOS_SEED") or random.randrange(1_000_000))
    print(f"operator kill seed: {seed} (PKO_CHAOS_SEED={seed} replays the order)")
    rng = random.Random(seed)
    for round_, moment in enumerate(faults.schedule(rng, MOMENTS, ROUNDS), start=1):
        await fleet.change(round_)
        wait = waits(moment, round_)
        if wait is None:
            await asyncio.sleep(rng.uniform(0.0, 1.0))
        else:
            await eventually(wait, moment, 180, interval=0.1)
        killed = await _kill_operator(ckc, real_cluster)
        print(f"round {round_}: SIGKILL {killed} {moment}")
        await wait_round(round_, 420)
        tally.rounds += 1

    # Judge the backends once nothing runs: an operation still in flight holds its lock (and a second `up` of a
    # round, if the operator started one, counts as duplicated once it ends).
    async def settled() -> bool:
        return all(condition(u, "Complete").get("status") == "True"
                   for u in (await ckc.list(resources.UPDATE, ns)).items)

    await eventually(settled, "every Update complete", 300, interval=0.5)
    for name in names:
        pod = await ckc.get(resources.POD, f"{name}-workspace-0", ns)
        assert pod["metadata"]["uid"] == pods[name]["metadata"]["uid"], f"{name}: its workspace pod was replaced"
        ups = filebackend.succeeded_ups(states[name])
        assert set(ups) >= {str(r) for r in range(ROUNDS + 1)}, f"{name}: the backend lacks rounds: {dict(ups)}"
        tally.count(name, states[name])
    assert tally.clean(), "\n".join(tally.details)
    for stack in await stacks():
        assert FINALIZER in (stack["metadata"].get("finalizers") or []), objects.name_of(stack)
    workspace_pods = sorted(objects.name_of(p) for p in (await ckc.list(resources.POD, ns)).items)
    assert workspace_pods == sorted(f"{name}-workspace-0" for name in names), workspace_pods

    # Deletion: the operator dies while the finalizers' `destroy`s run in the pods (each Stack's backend is on the
    # node, so what its destroy did is read after everything is gone).
    for name in names:
        await ckc.delete(resources.STACK, name, ns)

    async def destroy_running() -> bool:
        return any(condition(u, "Progressing").get("status") == "True"
                   and (u.get("spec") or {}).get("type") == "destroy"
                   for u in (await ckc.list(resources.UPDATE, ns)).items)

    await eventually(destroy_running, "a destroy in flight", 180, interval=0.05)
    print(f"final: SIGKILL {await _kill_operator(ckc, real_cluster)} during the finalizers' destroy")

    async def all_gone() -> bool:
        return not await stacks()

    await eventually(all_gone, "every Stack deleted", 420, interval=0.5)
    destroyed = {name for name in names if filebackend.destroyed(states[name])}
    locked = {name for name in names if filebackend.locks(states[name])}
    tally.locked += len(locked)
    tally.details += [f"{name}: locked after its destroy" for name in sorted(locked)]
    tally.lost = len(set(names) - destroyed)
    tally.details += [f"{name}: deleted without its stack destroyed" for name in sorted(set(names) - destroyed)]
    tally.record()
    assert tally.clean(), "\n".join(tally.details)
