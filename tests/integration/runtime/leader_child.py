"""A manager in its own process, for the leader-election tests (not a test module).

Usage: ``python leader_child.py KUBECONFIG NAMESPACE LEASE IDENTITY LOGFILE``. Runs a ConfigMap controller in
NAMESPACE behind Lease LEASE (4s/3s/1s) and appends JSON lines to LOGFILE: ``{"who", "what": "leading"}`` when
elected, ``{"who", "what": "start"|"end", "key", "t"}`` around every reconcile (``t`` on the system-wide
monotonic clock, so the test can compare it with its own). Each reconcile takes a while and asks to come back,
so the leader is reconciling most of the time — until it is killed. Its own log goes to ``LOGFILE.log``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time

from lightkube import AsyncClient, KubeConfig
from prometheus_client import CollectorRegistry

from pko import kube, runtime

TIMING = runtime.Timing(lease_duration=4, renew_deadline=3, retry_period=1)


def log_line(path: str, **fields: object) -> None:
    with open(path, "a") as log:
        log.write(json.dumps(fields) + "\n")


def reconciler(path: str, who: str) -> runtime.Reconciler:
    async def reconcile(key: kube.ObjectKey) -> runtime.Result:
        log_line(path, who=who, what="start", key=str(key), t=time.monotonic())
        await asyncio.sleep(0.3)
        log_line(path, who=who, what="end", key=str(key), t=time.monotonic())
        return runtime.Result(requeue_after=0.1)

    return reconcile


def manager(client: kube.Client, namespace: str, lease: str, who: str, path: str) -> runtime.Manager:
    mgr = runtime.Manager(
        client, namespace=namespace, health_address="0", metrics_address="0", registry=CollectorRegistry(),
        leader_election=runtime.LeaderElection(namespace=namespace, name=lease, identity=who, timing=TIMING),
    )
    mgr.controller("leader-test", reconciler(path, who), workers=4).watch(mgr.informer("ConfigMap"))
    return mgr


async def announce(mgr: runtime.Manager, path: str, who: str) -> None:
    await mgr.leading.wait()
    log_line(path, who=who, what="leading", t=time.monotonic())


async def main(kubeconfig: str, namespace: str, lease: str, who: str, path: str) -> None:
    client = kube.Client(AsyncClient(config=KubeConfig.from_file(kubeconfig)))
    mgr = manager(client, namespace, lease, who, path)
    async with asyncio.TaskGroup() as group:
        group.create_task(mgr.run())
        group.create_task(announce(mgr, path, who))


if __name__ == "__main__":
    logging.basicConfig(filename=f"{sys.argv[5]}.log", level=logging.INFO)
    asyncio.run(main(*sys.argv[1:6]))
