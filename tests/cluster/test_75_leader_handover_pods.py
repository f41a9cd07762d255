"""Leader handover on the `pod` runtime under load (docs/reliability.md): the chart's operator with two replicas
and leader election; 6 Stacks (10 under ``make soak``) change at once and, while their `up`s run in the workspace
pods, the leader's pod is deleted (as a node drain or `kubectl delete pod` does). A healthy replica takes the Lease
— the standing one or the Deployment's replacement pod, whichever wins the election (either is right) — and picks
up every in-flight Update: it waits for the `up` already running in a workspace pod rather than starting a second
one, so every Stack converges at its new generation, every Update completes, and the backends (directories on the
node mounted into the pods) show no round's `up` succeeding twice and no lock. The workspace pods are the same
throughout, and no `up` is interrupted by the handover: pko's agent keeps each running past the old leader's call.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pko.kube import client as kclient
from pko.kube import objects, resources
from pko.runtime.leaderelection import DEFAULT_LEASE_NAME
from pko.testing import cluster, filebackend
from pko.testing.clusterbed import OPERATOR_NAMESPACE, Release, RoundFleet, upgrade_pko
from pko.testing.waiting import condition, eventually

STACKS = 10 if os.environ.get("PKO_SOAK") else 6


@pytest.fixture
def two_replicas(real_cluster: cluster.Cluster, operator_release: Release) -> Iterator[None]:
    """The shared operator scaled to two replicas (leader election is always on in the chart); back to one after."""
    upgrade_pko(real_cluster, operator_release, "replicaCount=2")
    yield
    upgrade_pko(real_cluster, operator_release, "replicaCount=1")


async def _holder(ckc: kclient.Client) -> str:
    lease = await ckc.get_or_none(resources.LEASE, DEFAULT_LEASE_NAME, OPERATOR_NAMESPACE)
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


async def test_the_new_leader_picks_up_in_flight_updates_in_workspace_pods(
    ckc: kclient.Client, cnamespace: str, real_cluster: cluster.Cluster, two_replicas: None, tmp_path: Path
) -> None:
    ns = cnamespace
    fleet = await RoundFleet.create(ckc, real_cluster, ns, "h", STACKS, tmp_path)
    names, states = fleet.names, fleet.states

    await fleet.wait_round(0, 540)
    pods = {name: await ckc.get(resources.POD, f"{name}-workspace-0", ns) for name in names}
    holder = await _holder(ckc)
    leader = holder.split("_")[0]
    replicas = {objects.name_of(p) for p in (await ckc.list(resources.POD, OPERATOR_NAMESPACE)).items}
    assert leader in replicas, (holder, replicas)
    assert len(replicas) == 2, replicas

    await fleet.change(1)

    async def ups_running() -> int:
        return sum(1 for u in (await ckc.list(resources.UPDATE, ns)).items
                   if (u.get("spec") or {}).get("type") == "up" and condition(u, "Progressing").get("status") == "True")

    async def busy() -> bool:
        return await ups_running() >= 3

    await eventually(busy, "several `up`s in flight", 180, interval=0.05)
    running = await ups_running()
    real_cluster.kubectl("delete", "pod", "-n", OPERATOR_NAMESPACE, leader, "--wait=false")
    print(f"deleted the leader {leader} with {running} `up`s in flight")

    async def handed_over() -> bool:
        return (await _holder(ckc)) not in ("", holder)

    await eventually(handed_over, "another replica to take the Lease", 120, interval=0.2)
    new_leader = (await _holder(ckc)).split("_")[0]
    assert new_leader != leader, "the deleted pod still holds the Lease"
    pod = await ckc.get_or_none(resources.POD, new_leader, OPERATOR_NAMESPACE)
    assert pod is not None, f"the Lease went to {new_leader}, which is no replica"
    assert not pod["metadata"].get("deletionTimestamp"), f"the Lease went to {new_leader}, which is going"
    await fleet.wait_round(1, 420)
    pod = await ckc.get(resources.POD, new_leader, OPERATOR_NAMESPACE)
    assert condition(pod, "Ready").get("status") == "True", f"the new leader is not Ready: {pod.get('status')}"

    incomplete = [objects.name_of(u) for u in (await ckc.list(resources.UPDATE, ns)).items
                  if condition(u, "Complete").get("status") != "True"]
    assert not incomplete, f"Updates left incomplete: {incomplete}"
    tally = filebackend.Tally(rounds=1)
    for name in names:
        pod = await ckc.get(resources.POD, f"{name}-workspace-0", ns)
        assert pod["metadata"]["uid"] == pods[name]["metadata"]["uid"], f"{name}: its workspace pod was replaced"
        ups = filebackend.succeeded_ups(states[name])
        assert set(ups) >= {"0", "1"}, f"{name}: the backend lacks rounds: {dict(ups)}"
        tally.count(name, states[name])
        # the `up`s in flight went on in their pods and the new leader followed them (pko.agent.kept): none was
        # interrupted by the handover and run again
        unfinished = [e.get("result") for e in filebackend.history(states[name])
                      if e.get("kind") == "update" and e.get("result") != "succeeded"]
        assert not unfinished, f"{name}: an up ended {unfinished} across the handover"
    assert tally.clean(), "\n".join(tally.details)
    print(tally.line())
