"""Lease leader election between managers on one API server: only the leader reconciles; a cancelled leader
releases the lease and the standby takes over; a leader killed with SIGKILL is replaced once its lease expires,
and no key is ever reconciled by both at once."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from pko import kube, runtime
from pko.kube import ObjectKey, resources
from pko.testing import controlplane

Eventually = Callable[..., Awaitable[None]]
TIMING = runtime.Timing(lease_duration=4, renew_deadline=3, retry_period=1)
CHILD = Path(__file__).with_name("leader_child.py")


@contextlib.asynccontextmanager
async def running(manager: runtime.Manager) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(manager.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def elected_manager(
    client: kube.Client, namespace: str, lease: str, who: str, reconciled: list[ObjectKey]
) -> runtime.Manager:
    async def reconcile(key: ObjectKey) -> None:
        reconciled.append(key)

    manager = runtime.Manager(
        client, namespace=namespace, health_address="0", metrics_address="0", registry=CollectorRegistry(),
        leader_election=runtime.LeaderElection(namespace=namespace, name=lease, identity=who, timing=TIMING),
    )
    manager.controller("leader-test", reconcile).watch(manager.informer("ConfigMap"))
    return manager


async def renewed_at(client: kube.Client, namespace: str, lease: str) -> datetime.datetime:
    found = await client.get(resources.LEASE, lease, namespace)
    return datetime.datetime.fromisoformat(found["spec"]["renewTime"])


async def holder(client: kube.Client, namespace: str, lease: str) -> str | None:
    found = await client.get_or_none(resources.LEASE, lease, namespace)
    return None if found is None else str((found.get("spec") or {}).get("holderIdentity") or "")


async def test_only_the_leader_reconciles_and_a_cancelled_leader_hands_over(
    client: kube.Client, namespace: str, eventually: Eventually
) -> None:
    lease = f"lease-{uuid.uuid4().hex[:6]}"
    first_keys: list[ObjectKey] = []
    second_keys: list[ObjectKey] = []
    first = elected_manager(client, namespace, lease, "first", first_keys)
    second = elected_manager(client, namespace, lease, "second", second_keys)
    names = [ObjectKey(namespace, f"cm{i}") for i in range(3)]
    async with running(first) as first_task:
        await asyncio.wait_for(first.leading.wait(), 60)
        async with running(second):
            for key in names:
                await client.create(resources.CONFIG_MAP.new(key.name, namespace))
            await eventually(lambda: set(names) <= set(first_keys), "the leader to reconcile every ConfigMap")
            await eventually(lambda: second.informer("ConfigMap").store.get(names[-1]) is not None,
                             "the standby's cache to be warm")
            assert second_keys == []
            assert not second.is_leader
            assert await holder(client, namespace, lease) == "first"

            first_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await first_task
            assert not first.is_leader
            assert await holder(client, namespace, lease) in ("", "second")  # released, maybe already taken
            count = len(first_keys)
            await eventually(lambda: second.is_leader, "the standby to take over")
            await eventually(lambda: set(names) <= set(second_keys), "the new leader to reconcile everything")
            assert len(first_keys) == count


async def test_cancelled_leader_releases_the_lease(client: kube.Client, namespace: str) -> None:
    lease = f"lease-{uuid.uuid4().hex[:6]}"
    manager = elected_manager(client, namespace, lease, "only", [])
    async with running(manager):
        await asyncio.wait_for(manager.leading.wait(), 60)
        assert await holder(client, namespace, lease) == "only"
        assert manager.registry.get_sample_value("leader_election_master_status", {"name": lease}) == 1
    assert await holder(client, namespace, lease) == ""
    assert manager.registry.get_sample_value("leader_election_master_status", {"name": lease}) == 0
    spec = (await client.get(resources.LEASE, lease, namespace))["spec"]
    assert spec["leaseTransitions"] == 0
    assert spec["leaseDurationSeconds"] == 1


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def log_line(path: Path, **fields: object) -> None:
    with path.open("a") as log:
        log.write(json.dumps(fields) + "\n")


def intervals(entries: list[dict[str, Any]], who: str, killed_at: float) -> dict[str, list[tuple[float, float]]]:
    """Reconcile intervals per key of one manager; one cut short by SIGKILL ends at the kill."""
    open_starts: dict[str, float] = {}
    result: dict[str, list[tuple[float, float]]] = {}
    for entry in entries:
        if entry.get("who") != who or entry["what"] not in ("start", "end"):
            continue
        if entry["what"] == "start":
            open_starts[entry["key"]] = entry["t"]
        else:
            result.setdefault(entry["key"], []).append((open_starts.pop(entry["key"]), entry["t"]))
    for key, start in open_starts.items():
        result.setdefault(key, []).append((start, killed_at))
    return result


async def test_leader_killed_with_sigkill_is_replaced_without_overlap(
    client: kube.Client, namespace: str, eventually: Eventually, control_plane: controlplane.ControlPlane,
    tmp_path: Path,
) -> None:
    lease = f"lease-{uuid.uuid4().hex[:6]}"
    log = tmp_path / "reconciles.jsonl"
    child = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), str(control_plane.kubeconfig), namespace, lease, "child", str(log),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,  # it logs to <log>.log
    )
    try:
        await eventually(lambda: any(e["what"] == "leading" for e in read_log(log)), "the child to lead")
        names = [f"cm{i}" for i in range(3)]
        for name in names:
            await client.create(resources.CONFIG_MAP.new(name, namespace))

        async def reconcile(key: ObjectKey) -> runtime.Result:
            log_line(log, who="parent", what="start", key=str(key), t=time.monotonic())
            await asyncio.sleep(0.3)
            log_line(log, who="parent", what="end", key=str(key), t=time.monotonic())
            return runtime.Result(requeue_after=0.1)

        manager = runtime.Manager(
            client, namespace=namespace, health_address="0", metrics_address="0", registry=CollectorRegistry(),
            leader_election=runtime.LeaderElection(namespace=namespace, name=lease, identity="parent",
                                                   timing=TIMING),
        )
        manager.controller("leader-test", reconcile, workers=4).watch(manager.informer("ConfigMap"))
        async with running(manager):
            child_keys = {f"{namespace}/{n}" for n in names}
            await eventually(lambda: child_keys <= {e.get("key") for e in read_log(log) if e["who"] == "child"},
                             "the child to reconcile every ConfigMap")
            # The standby keeps waiting while the leader renews: watch the leader renew for a whole lease duration.
            renewed = await renewed_at(client, namespace, lease)

            async def renewed_for_a_lease_duration() -> bool:
                later = await renewed_at(client, namespace, lease)
                return (later - renewed).total_seconds() >= TIMING.lease_duration

            await eventually(renewed_for_a_lease_duration, "the leader to renew for a whole lease duration")
            assert not manager.is_leader
            assert not [e for e in read_log(log) if e["who"] == "parent"]

            child.send_signal(signal.SIGKILL)
            await child.wait()
            killed_at = time.monotonic()
            await eventually(lambda: manager.is_leader, "the standby to take over from the killed leader")
            took_over = time.monotonic() - killed_at
            await eventually(lambda: child_keys <= {e.get("key") for e in read_log(log) if e["who"] == "parent"},
                             "the new leader to reconcile every ConfigMap")
        print(f"handover after SIGKILL: {took_over:.2f}s (lease duration {TIMING.lease_duration}s)")
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()

    entries = read_log(log)
    by_child = intervals(entries, "child", killed_at)
    by_parent = intervals(entries, "parent", killed_at)
    assert by_child
    assert by_parent
    for key, spans in by_parent.items():
        for start, end in spans:
            assert start >= killed_at, f"{key} reconciled by the standby while the leader lived"
            for other_start, other_end in by_child.get(key, []):
                assert end <= other_start or start >= other_end, f"{key} reconciled by both at once"
    assert await holder(client, namespace, lease) == ""  # the parent released it when cancelled


async def test_reconciling_stops_when_the_lease_is_lost(
    client: kube.Client, namespace: str, eventually: Eventually
) -> None:
    lease = f"lease-{uuid.uuid4().hex[:6]}"
    in_flight: set[ObjectKey] = set()
    calls: list[ObjectKey] = []

    async def reconcile(key: ObjectKey) -> runtime.Result:
        calls.append(key)
        in_flight.add(key)
        try:
            await asyncio.sleep(0.2)
        finally:
            in_flight.discard(key)
        return runtime.Result(requeue_after=0.05)

    manager = runtime.Manager(
        client, namespace=namespace, health_address="0", metrics_address="0", registry=CollectorRegistry(),
        leader_election=runtime.LeaderElection(namespace=namespace, name=lease, identity="victim", timing=TIMING),
    )
    controller = manager.controller("leader-test", reconcile).watch(manager.informer("ConfigMap"))
    await client.create(resources.CONFIG_MAP.new("busy", namespace))
    async with running(manager):
        await eventually(lambda: len(calls) >= 2, "the leader to reconcile repeatedly")
        # Another candidate takes the lease over (as if our renewals had stopped reaching the server).
        current = await client.get(resources.LEASE, lease, namespace)
        stolen = {**current["spec"], "holderIdentity": "thief", "leaseDurationSeconds": 3600}
        await client.replace({**current, "spec": stolen})
        await eventually(lambda: not manager.is_leader, "the victim to notice it lost the lease")
        assert not in_flight  # in-flight reconciles were cancelled with the controllers
        count = len(calls)
        # The controller stopped with its leadership (its queue shut down): nothing more is reconciled.
        await eventually(lambda: controller.queue.shutting_down, "the controller's queue to shut down")
        assert len(calls) == count
        assert await holder(client, namespace, lease) == "thief"
    assert await holder(client, namespace, lease) == "thief"  # never release a lease held by someone else


async def test_what_a_term_of_leadership_ran_outside_the_controllers_stops_with_it(
    client: kube.Client, namespace: str, eventually: Eventually
) -> None:
    """A part of the operator that runs work of its own outside the controllers (the Update controller's
    operations, each a task; the pool's holders) hears when leadership is gained and lost: on a loss its work is
    stopped before the process campaigns again — it would run beside the new leader's — and a new term starts it
    afresh."""
    lease = f"lease-{uuid.uuid4().hex[:6]}"
    said: list[str] = []
    operations: list[asyncio.Task[None]] = []

    async def reconcile(key: ObjectKey) -> None:
        if not operations or operations[-1].done():
            operations.append(asyncio.create_task(asyncio.sleep(3600)))  # an operation in a task of its own

    async def lost() -> None:
        for task in operations:
            task.cancel()
        await asyncio.gather(*operations, return_exceptions=True)
        said.append("lost")

    manager = runtime.Manager(
        client, namespace=namespace, health_address="0", metrics_address="0", registry=CollectorRegistry(),
        leader_election=runtime.LeaderElection(namespace=namespace, name=lease, identity="term", timing=TIMING),
    )
    manager.on_leadership(lambda: said.append("gained"), lost)
    manager.controller("leader-test", reconcile).watch(manager.informer("ConfigMap"))
    await client.create(resources.CONFIG_MAP.new("work", namespace))
    async with running(manager):
        await eventually(lambda: bool(operations), "an operation to start")
        assert said == ["gained"]
        current = await client.get(resources.LEASE, lease, namespace)
        await client.replace({**current, "spec": {**current["spec"], "holderIdentity": "thief",
                                                  "leaseDurationSeconds": 3600}})
        await eventually(lambda: said == ["gained", "lost"], "the lost leadership to be told")
        assert operations[0].cancelled()  # stopped, not left to run beside the thief's
        await client.delete(resources.LEASE, lease, namespace)  # the thief goes: the lease is free again
        await eventually(lambda: said == ["gained", "lost", "gained"], "the next term to be told", timeout=30)
        await eventually(lambda: len(operations) == 2 and not operations[1].done(), "its work to start afresh")
    assert said == ["gained", "lost", "gained", "lost"]
