"""Figures for the controller runtime (a script, not a test): run ``python bench/runtime/bench_runtime.py``.

* queue: reconciles per second through the work queue and controller workers, 1000 keys, no-op reconcile;
* queue+await: the same with a reconcile that yields to the loop (``asyncio.sleep(0)``);
* informer: memory held by the cache per 1000 ConfigMaps, and list time, against a real API server;
* end to end: seconds from creating N ConfigMaps to all of them reconciled by a manager.

``--no-cluster`` skips the parts that need etcd + kube-apiserver (built by ``make tools``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import tempfile
import time
import tracemalloc
from pathlib import Path

from lightkube import AsyncClient, KubeConfig
from prometheus_client import CollectorRegistry

from pko import kube, runtime
from pko.kube import ObjectKey, resources
from pko.runtime import controller, workqueue


async def queue_throughput(keys: int, workers: int, yield_in_reconcile: bool) -> float:
    done = asyncio.Event()
    seen = 0

    async def reconcile(key: ObjectKey) -> None:
        nonlocal seen
        if yield_in_reconcile:
            await asyncio.sleep(0)
        seen += 1
        if seen == keys:
            done.set()

    ctl = controller.Controller("bench", reconcile, workers=workers)
    queue: workqueue.WorkQueue[ObjectKey] = workqueue.WorkQueue()

    async def work() -> None:
        while True:
            try:
                key = await queue.get()
            except workqueue.ShutDown:
                return
            try:
                await ctl.process(queue, key)
            finally:
                queue.done(key)

    tasks = [asyncio.create_task(work()) for _ in range(workers)]
    started = time.perf_counter()
    for i in range(keys):
        queue.add(ObjectKey("bench", f"k{i}"))
    await done.wait()
    elapsed = time.perf_counter() - started
    queue.shutdown()
    await asyncio.gather(*tasks)
    return keys / elapsed


async def create_configmaps(client: kube.Client, namespace: str, count: int, concurrency: int = 16) -> float:
    payload = {f"key{i}": "x" * 64 for i in range(8)}
    semaphore = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with semaphore:
            await client.create(resources.CONFIG_MAP.new(f"cm{i:05d}", namespace, data=payload))

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    return time.perf_counter() - started


async def informer_memory(client: kube.Client, namespace: str, count: int) -> None:
    created = await create_configmaps(client, namespace, count)
    print(f"  created {count} ConfigMaps in {created:.1f}s ({count / created:.0f}/s)")
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    informer = runtime.Informer(client, resources.CONFIG_MAP, namespace=namespace)
    task = asyncio.create_task(informer.run())
    started = time.perf_counter()
    await informer.wait_synced()
    listed = time.perf_counter() - started
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    held = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    print(f"  informer list+sync of {len(informer.store)} objects: {listed:.2f}s")
    print(f"  informer memory: {held / 1024:.0f} KiB total, {held / len(informer.store) * 1000 / 1024:.0f} KiB "
          f"per 1000 ConfigMaps (~600 B of data each)")


async def end_to_end(client: kube.Client, namespace: str, count: int, workers: int) -> None:
    reconciled: set[ObjectKey] = set()
    all_done = asyncio.Event()

    async def reconcile(key: ObjectKey) -> None:
        reconciled.add(key)
        if len(reconciled) == count:
            all_done.set()

    manager = runtime.Manager(client, namespace=namespace, health_address="0", metrics_address="0",
                              registry=CollectorRegistry())
    manager.controller("bench", reconcile, workers=workers).watch(manager.informer("ConfigMap"))
    task = asyncio.create_task(manager.run())
    await manager.informer("ConfigMap").wait_synced()
    started = time.perf_counter()
    await create_configmaps(client, namespace, count)
    created = time.perf_counter() - started
    await all_done.wait()
    elapsed = time.perf_counter() - started
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    print(f"  {count} ConfigMaps created and reconciled in {elapsed:.2f}s "
          f"(creation alone {created:.2f}s; last reconcile {elapsed - created:.3f}s after the last create)")


async def cluster_figures(objects: int, workers: int) -> None:
    from pko.testing import controlplane

    with controlplane.start(Path(tempfile.mkdtemp(prefix="pko-bench-"))) as cp:
        client = kube.Client(AsyncClient(config=KubeConfig.from_file(str(cp.kubeconfig))))
        for name in ("bench-informer", "bench-e2e"):
            await client.create(resources.NAMESPACE.new(name))
        print("informer:")
        await informer_memory(client, "bench-informer", objects)
        print("end to end:")
        await end_to_end(client, "bench-e2e", objects, workers)
        await client.api.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=25)
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--no-cluster", action="store_true")
    args = parser.parse_args()
    print("queue:")
    for yielding in (False, True):
        rates = [await queue_throughput(args.keys, args.workers, yielding) for _ in range(3)]
        label = "reconcile awaits" if yielding else "no-op reconcile"
        print(f"  {args.keys} keys, {args.workers} workers, {label}: {max(rates):,.0f} reconciles/s (best of 3)")
    if not args.no_cluster:
        await cluster_figures(args.objects, args.workers)


if __name__ == "__main__":
    asyncio.run(main())
