"""Controllers run by a manager against the real API server: reconcile on events and on owned objects, requeue
with ``requeue_after`` and after errors, workers in parallel across keys but serial per key, and the
``/healthz``, ``/readyz`` and ``/metrics`` endpoints."""

from __future__ import annotations

import asyncio
import contextlib
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable

from prometheus_client import CollectorRegistry

from pko import kube
from pko.kube import ObjectKey, owners, resources
from pko.runtime import Manager, Result, for_controller

Eventually = Callable[..., Awaitable[None]]


@contextlib.asynccontextmanager
async def running(manager: Manager) -> AsyncIterator[Manager]:
    task = asyncio.create_task(manager.run())
    try:
        yield manager
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def new_manager(client: kube.Client, namespace: str) -> Manager:
    return Manager(client, namespace=namespace, health_address="127.0.0.1:0", metrics_address="127.0.0.1:0",
                   registry=CollectorRegistry())


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


async def test_reconciles_configmaps_and_is_retriggered_by_owned_objects(
    client: kube.Client, namespace: str, eventually: Eventually
) -> None:
    reconciled: list[ObjectKey] = []

    async def reconcile(key: ObjectKey) -> None:
        reconciled.append(key)

    manager = new_manager(client, namespace)
    manager.controller("configmaps", reconcile, workers=2) \
        .watch(manager.informer("ConfigMap")) \
        .watch(manager.informer("Secret"), for_controller(resources.CONFIG_MAP))
    parent_key = ObjectKey(namespace, "parent")
    async with running(manager):
        parent = await client.create(resources.CONFIG_MAP.new("parent", namespace))
        await client.create(resources.CONFIG_MAP.new("other", namespace))
        await eventually(lambda: {parent_key, ObjectKey(namespace, "other")} <= set(reconciled), "both ConfigMaps")

        child = owners.set_controller_reference(resources.SECRET.new("child", namespace), parent)
        before = reconciled.count(parent_key)
        await client.create(child)
        await eventually(lambda: reconciled.count(parent_key) > before, "the owner after its Secret was created")
        before = reconciled.count(parent_key)
        await client.patch("Secret", "child", {"stringData": {"k": "v"}}, namespace)
        await eventually(lambda: reconciled.count(parent_key) > before, "the owner after its Secret changed")
        assert ObjectKey(namespace, "child") not in reconciled


async def test_requeue_after_and_error_retries(client: kube.Client, namespace: str, eventually: Eventually) -> None:
    calls: dict[str, int] = {"later": 0, "flaky": 0}

    async def reconcile(key: ObjectKey) -> Result | None:
        calls[key.name] += 1
        if key.name == "later" and calls["later"] < 3:
            return Result(requeue_after=0.1)
        if key.name == "flaky" and calls["flaky"] < 3:
            raise RuntimeError("not yet")
        return None

    manager = new_manager(client, namespace)
    controller = manager.controller("requeues", reconcile).watch(manager.informer("ConfigMap"))
    async with running(manager):
        await client.create(resources.CONFIG_MAP.new("later", namespace))
        await client.create(resources.CONFIG_MAP.new("flaky", namespace))
        await eventually(lambda: calls == {"later": 3, "flaky": 3}, "three reconciles of each, with no new events")
        # A successful reconcile does not come back by itself: once done, neither key is queued or scheduled.
        queue = controller.queue
        keys = [ObjectKey(namespace, "later"), ObjectKey(namespace, "flaky")]
        await eventually(lambda: not any(queue.is_processing(k) for k in keys), "the last reconciles to finish")
        assert len(queue) == 0
        assert [queue.pending_after(k) for k in keys] == [None, None]
        assert calls == {"later": 3, "flaky": 3}
    registry = manager.registry
    labels = {"controller": "requeues"}
    assert registry.get_sample_value("controller_runtime_reconcile_errors_total", labels) == 2
    assert registry.get_sample_value("controller_runtime_reconcile_total",
                                     {**labels, "result": "requeue_after"}) == 2
    assert registry.get_sample_value("controller_runtime_reconcile_total", {**labels, "result": "success"}) == 2
    assert registry.get_sample_value("workqueue_retries_total", {**labels, "name": "requeues"}) == 2


async def test_workers_run_distinct_keys_in_parallel_but_one_key_serially(
    client: kube.Client, namespace: str, eventually: Eventually
) -> None:
    workers = 4
    active: set[str] = set()
    overlaps: list[str] = []
    peak = 0
    all_in_flight = asyncio.Event()
    release = asyncio.Event()
    calls: dict[str, int] = {}

    async def reconcile(key: ObjectKey) -> None:
        nonlocal peak
        if key.name in active:
            overlaps.append(key.name)
        active.add(key.name)
        calls[key.name] = calls.get(key.name, 0) + 1
        peak = max(peak, len(active))
        if len(active) == workers:
            all_in_flight.set()
        try:
            await release.wait()
        finally:
            active.discard(key.name)

    manager = new_manager(client, namespace)
    manager.controller("parallel", reconcile, workers=workers).watch(manager.informer("ConfigMap"))
    async with running(manager):
        for i in range(workers):
            await client.create(resources.CONFIG_MAP.new(f"k{i}", namespace))
        # Only reachable if all workers are inside reconcile at once, each with its own key.
        await asyncio.wait_for(all_in_flight.wait(), 60)
        # Changes to a key being reconciled must wait for that reconcile to finish.
        for n in range(3):
            await client.patch("ConfigMap", "k0", {"data": {"n": str(n)}}, namespace)
        cache = manager.informer("ConfigMap").store

        def k0_changed() -> bool:
            k0 = cache.get(ObjectKey(namespace, "k0"))
            return k0 is not None and k0.get("data") == {"n": "2"}

        await eventually(k0_changed, "the cache to see the changes")
        assert calls["k0"] == 1
        release.set()
        await eventually(lambda: calls.get("k0") == 2 and not active, "one more reconcile of k0 for its changes")
    assert overlaps == []
    assert peak == workers


async def test_probes_and_metrics_endpoints(client: kube.Client, namespace: str, eventually: Eventually) -> None:
    async def reconcile(key: ObjectKey) -> None:
        return None

    manager = new_manager(client, namespace)
    manager.controller("cm-controller", reconcile).watch(manager.informer("ConfigMap"))
    async with running(manager):
        await client.create(resources.CONFIG_MAP.new("m", namespace))
        await eventually(lambda: manager.registry.get_sample_value(
            "controller_runtime_reconcile_total", {"controller": "cm-controller", "result": "success"}) == 1.0,
            "a successful reconcile")
        health = manager.health_server.port
        assert await asyncio.to_thread(http_get, health, "/healthz") == (200, "ok")
        assert await asyncio.to_thread(http_get, health, "/readyz") == (200, "ok")
        status, text = await asyncio.to_thread(http_get, manager.metrics_server.port, "/metrics")
    assert status == 200
    for line in (
        'controller_runtime_reconcile_total{controller="cm-controller",result="success"} 1.0',
        'controller_runtime_reconcile_errors_total{controller="cm-controller"} 0.0',
        'controller_runtime_reconcile_time_seconds_count{controller="cm-controller"} 1.0',
        'workqueue_adds_total{controller="cm-controller",name="cm-controller"} 1.0',
        'workqueue_depth{controller="cm-controller",name="cm-controller"} 0.0',
        'workqueue_retries_total{controller="cm-controller",name="cm-controller"} 0.0',
        'controller_runtime_max_concurrent_reconciles{controller="cm-controller"} 1.0',
    ):
        assert line in text.splitlines(), line


async def test_watches_and_informers_added_while_running(
    client: kube.Client, namespace: str, eventually: Eventually
) -> None:
    reconciled: list[ObjectKey] = []

    async def reconcile(key: ObjectKey) -> None:
        reconciled.append(key)

    manager = new_manager(client, namespace)
    configmaps = manager.controller("late-watch", reconcile).watch(manager.informer("ConfigMap"))
    parent_key = ObjectKey(namespace, "parent")
    async with running(manager):
        parent = await client.create(resources.CONFIG_MAP.new("parent", namespace))
        await eventually(lambda: parent_key in reconciled, "the ConfigMap")
        await eventually(lambda: manager.is_leader, "the manager to run its controllers")
        # As the Stack controller does for a Flux kind it sees for the first time.
        configmaps.watch(manager.informer("Secret"), for_controller(resources.CONFIG_MAP))
        await eventually(lambda: manager.informer("Secret").synced, "the new informer to sync")
        before = reconciled.count(parent_key)
        await client.create(owners.set_controller_reference(resources.SECRET.new("late", namespace), parent))
        await eventually(lambda: reconciled.count(parent_key) > before, "the owner via the late watch")
