"""The pool of active workspaces (`--max-active-workspaces`), end to end on the real control plane with agents as
local processes: a fleet larger than the pool converges with never more agents running than the pool allows; the
Workspaces and Stacks that wait say so (`Queued`, with their place); idle workspaces give their slot back by
sleeping, and a later update of a Stack whose workspace slept to make room queues, wakes and runs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import stack_e2e as e2e

from pko.api import lanes
from pko.controllers.workspace import fleet, pool
from pko.kube import client as kclient
from pko.kube import objects, resources
from pko.testing import controlplane, gitserver, operator, waiting

POOL = 2
FLEET = 5


class _Watch:
    """Samples, every 50 ms, how many agents run and which Workspaces and Stacks show `Queued`."""

    def __init__(self, op: operator.Operator) -> None:
        self.op = op
        self.most_agents = 0
        self.queued_stacks: set[str] = set()
        self.queued_messages: list[str] = []
        self.deepest_queue = 0.0  # pko_workspace_pool_queue_depth
        self.places: dict[str, list[int]] = {}  # the places each queued Workspace showed, in order

    async def run(self, kc: kclient.Client, namespace: str) -> None:
        runtime = self.op.controllers.local_runtime
        assert runtime is not None
        while True:
            alive = sum(1 for agent in list(runtime.agents.values()) if agent.alive)
            self.most_agents = max(self.most_agents, alive)
            depth = self.op.manager.registry.get_sample_value("pko_workspace_pool_queue_depth") or 0.0
            self.deepest_queue = max(self.deepest_queue, depth)
            for stack in (await kc.list(resources.STACK, namespace)).items:
                reconciling = e2e.condition(stack, "Reconciling")
                if reconciling.get("reason") == "Queued":
                    self.queued_stacks.add(stack["metadata"]["name"])
                    self.queued_messages.append(reconciling.get("message", ""))
            for workspace in (await kc.list(resources.WORKSPACE, namespace)).items:
                ready = e2e.condition(workspace, "Ready")
                place = lanes.queued_place(ready.get("message", "")) if ready.get("reason") == "Queued" else None
                shown = self.places.setdefault(workspace["metadata"]["name"], [])
                if place is not None and (not shown or shown[-1] != place):
                    shown.append(place)
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def _watching(op: operator.Operator, kc: kclient.Client, namespace: str) -> AsyncIterator[_Watch]:
    """A :class:`_Watch` sampling while the block runs."""
    watch = _Watch(op)
    sampler = asyncio.create_task(watch.run(kc, namespace))
    try:
        yield watch
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler


async def _agents_alive(op: operator.Operator) -> int:
    runtime = op.controllers.local_runtime
    assert runtime is not None
    return sum(1 for agent in list(runtime.agents.values()) if agent.alive)


async def test_a_fleet_larger_than_the_pool_converges_within_it(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, cluster: controlplane.ControlPlane,
    tmp_path: Path, pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    # a waiter is shown its moves at most every SHOW_EVERY seconds; this queue of three drains faster than 30 s
    monkeypatch.setattr(pool, "SHOW_EVERY", 2.0)
    # a holder's look at the end of its first Update's grace is still owed throughout this test, unless dropped
    monkeypatch.setattr(fleet, "FIRST_UPDATE_GRACE", 600.0)
    repo = f"pool-{namespace}"
    commit = e2e.create_repo(git, repo)
    names = [f"s{i}" for i in range(FLEET)]
    async with operator.running(cluster.kubeconfig, tmp_path / "workspaces", namespace=namespace,
                                max_active_workspaces=POOL) as op, _watching(op, kc, namespace) as watch:
        for name in names:
            await kc.create(e2e.git_stack(name, namespace, git.http_url(repo), commit=commit))
        for name in names:
            await e2e.wait_for(kc, resources.STACK, name, namespace, e2e.is_ready, timeout=240)
        assert watch.most_agents <= POOL, f"{watch.most_agents} agents ran at once with a pool of {POOL}"
        assert watch.most_agents == POOL  # the pool was used, not a queue of one
        assert watch.queued_stacks, "no Stack ever said it was queued"
        assert any("(change lane)" in m and f"all {POOL} slots" in m
                   for m in watch.queued_messages), watch.queued_messages[:3]
        # the Stack shows that it waits, not its place (which moves: a write of every waiting Stack each time)
        assert not [m for m in watch.queued_messages if "place in the queue:" in m], watch.queued_messages[:3]
        queued = sorted(watch.queued_stacks)[0]
        said = await e2e.events_with(kc, queued, namespace, "StackQueued")
        assert "waiting for a workspace slot" in said[0]["message"]
        assert "place in the queue: " in said[0]["message"]  # where it entered the queue
        # ... and its Workspace, which shows the place in its status, posts no event of its own for it
        assert not [e for e in await e2e.events_of(kc, queued, namespace, "Workspace") if e["reason"] == "Queued"]
        # the Workspace shows its place, and follows the queue as it moves (the pool wakes it: its own look at the
        # queue comes only every 5 minutes)
        assert any(len(shown) > 1 and shown[-1] < shown[0] for shown in watch.places.values()), watch.places
        # the slots went round: some workspaces slept to make room, and said why
        workspaces = (await kc.list(resources.WORKSPACE, namespace)).items
        sleeping = [w for w in workspaces if e2e.condition(w, "Ready").get("reason") == "Sleeping"]
        assert len(sleeping) >= FLEET - POOL
        assert all("to give its slot to a waiting workspace" in e2e.condition(w, "Ready")["message"]
                   for w in sleeping)
        # a Workspace that slept has no reconcile owed for later (its grace's look was for it awake)
        queue = op.controllers.workspaces.controller.queue
        owed = [w["metadata"]["name"] for w in sleeping
                if queue.pending_after(objects.ObjectKey(namespace, w["metadata"]["name"])) is not None]
        assert not owed, owed
        assert await _agents_alive(op) <= POOL
        # each Stack was told of its update once, however often its queued Workspace woke it (the reference: at
        # every look until the Update exists)
        for name in names:
            detected = await e2e.events_with(kc, name, namespace, "StackUpdateDetected")
            assert [(e["message"], e.get("count")) for e in detected] == [("Initial stack update", 1)], detected

        # An update of a Stack whose workspace slept: it asks for a slot again (one of the idle ones makes
        # room), runs, and the pool still holds.
        asleep = sleeping[0]["metadata"]["name"]
        before = e2e.last_update(await kc.get(resources.STACK, asleep, namespace))["name"]
        await e2e.request_reconcile(kc, asleep, namespace, "again")
        again = await e2e.wait_for(kc, resources.STACK, asleep, namespace,
                                   lambda o: e2e.is_ready(o)
                                   and e2e.last_update(o).get("reconcileRequest") == "again", timeout=120)
        assert e2e.last_update(again)["name"] != before
        assert e2e.last_update(again)["state"] == "succeeded"
        detected = await e2e.events_with(kc, asleep, namespace, "StackUpdateDetected")
        assert sorted(e["message"] for e in detected) == ["Initial stack update", 'Sync request: "again"']
        assert watch.most_agents <= POOL
        registry = op.manager.registry
        assert registry.get_sample_value("pko_workspace_pool_slots") == POOL
        assert watch.deepest_queue >= 1
        assert (registry.get_sample_value("pko_workspace_pool_active") or 0) <= POOL


async def test_a_stalled_workspace_gives_its_slot_to_a_waiting_one(
    kc: kclient.Client, namespace: str, cluster: controlplane.ControlPlane,
    tmp_path: Path, pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Workspace that cannot work until its spec changes (Stalled: its stack does not exist and may not be
    created) must not hold the only slot for ever: its agent stops, its Stalled condition stays, and it does not
    ask for a slot again until its spec changes."""
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    project = {"name": "pooled", "runtime": "yaml"}
    async with operator.running(cluster.kubeconfig, tmp_path / "workspaces", namespace=namespace,
                                max_active_workspaces=1) as op:
        runtime = op.controllers.local_runtime
        assert runtime is not None
        await kc.create(resources.WORKSPACE.new("broken", namespace, spec={
            "projectInfo": project, "stacks": [{"name": "missing", "create": False}]}))
        await kc.create(resources.WORKSPACE.new("healthy", namespace, spec={
            "projectInfo": project, "stacks": [{"name": "dev", "create": True}]}))
        await e2e.wait_for(kc, resources.WORKSPACE, "healthy", namespace,
                           lambda o: e2e.condition(o, "Ready").get("status") == "True", timeout=120)
        broken = await kc.get(resources.WORKSPACE, "broken", namespace)
        assert e2e.condition(broken, "Stalled").get("status") == "True"
        assert e2e.condition(broken, "Ready").get("reason") == "InitializationFailed"
        assert "address" not in broken["status"]
        said = await e2e.events_with(kc, "broken", namespace, "Yielded", kind="Workspace")
        assert "Stalled workspace" in said[0]["message"]
        agent = runtime.get(objects.ObjectKey(namespace, "broken"))
        assert agent is None or not agent.alive
        assert await _agents_alive(op) == 1
        # it stays out of the queue: the healthy one keeps its slot, and nobody waits
        assert op.controllers.workspaces.reconciler.pool is not None
        assert op.controllers.workspaces.reconciler.pool.waiting() == 0


async def test_a_restarted_operator_keeps_the_bound(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, cluster: controlplane.ControlPlane,
    tmp_path: Path, pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operator stops while its pool is full and Stacks wait; the next one counts the workspaces that were
    running (from their statuses) before it grants a slot, and the fleet converges within the bound."""
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    repo = f"pool-restart-{namespace}"
    commit = e2e.create_repo(git, repo)
    names = [f"r{i}" for i in range(4)]
    most = 0
    async with operator.running(cluster.kubeconfig, tmp_path / "workspaces", namespace=namespace,
                                max_active_workspaces=POOL) as first:
        async with _watching(first, kc, namespace) as watch:
            for name in names:
                await kc.create(e2e.git_stack(name, namespace, git.http_url(repo), commit=commit))
            full = first.controllers.workspaces.reconciler.pool
            assert full is not None
            await waiting.eventually(lambda: full.active() == POOL and full.waiting() >= 1,
                                     "a full pool and a queue", 120, interval=0.02)
        most = watch.most_agents
    running = [w["metadata"]["name"] for w in (await kc.list(resources.WORKSPACE, namespace)).items
               if e2e.condition(w, "Ready").get("reason") not in (None, "Queued", "Sleeping")]
    assert len(running) <= POOL
    async with operator.running(cluster.kubeconfig, tmp_path / "workspaces-2", namespace=namespace,
                                max_active_workspaces=POOL) as second:
        async with _watching(second, kc, namespace) as watch:
            for name in names:
                await e2e.wait_for(kc, resources.STACK, name, namespace, e2e.is_ready, timeout=240)
        most = max(most, watch.most_agents)
        pool_of = second.controllers.workspaces.reconciler.pool
        assert pool_of is not None
        assert pool_of.active() <= POOL
    assert most <= POOL, f"{most} agents ran at once with a pool of {POOL}"
