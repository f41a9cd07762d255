"""Update throughput (a script, not a test): N Workspaces, one `up` each of a program that sleeps S seconds.

    python bench/updates/run.py                      # 50 updates x 5 s, 25 workers (the Go operator's default)
    python bench/updates/run.py --updates 12 --workers 4

Starts its own etcd + kube-apiserver, a loopback git server and the operator in-process with the `local` workspace
runtime (every agent and every `pulumi up` is a real process: 50 updates is ~150 processes, give it the box).
Prints the time for the Workspaces to become Ready, the time from creating the Updates to the last one Complete,
and the peak number of operations running at once — from Pulumi's own start/end times on the Updates, and from
polling `Progressing=True`. The Go operator runs each operation inside a reconcile, so its peak is bounded by
`MAX_CONCURRENT_RECONCILES` (25) and 50 x 5 s takes at least two rounds there.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lightkube

from pko.kube import client as kclient
from pko.kube import objects, owners, resources
from pko.testing import controlplane, gitserver, operator, pulumi


def program(sleep: float) -> dict[str, str]:
    return {
        "Pulumi.yaml": "name: sleepy\nruntime: python\n",
        "__main__.py": f'import time\n\nimport pulumi\n\ntime.sleep({sleep})\npulumi.export("slept", {sleep})\n',
    }


def peak_overlap(intervals: Sequence[tuple[datetime.datetime, datetime.datetime]]) -> int:
    """Most intervals [start, end) sharing an instant; starts have whole seconds, so probe half a second in."""
    probes = [start + datetime.timedelta(seconds=0.5) for start, _ in intervals]
    return max((sum(1 for s, e in intervals if s <= t < e) for t in probes), default=0)


def _time(value: str) -> datetime.datetime:
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


def _is(obj: dict[str, Any], type_: str) -> bool:
    return any(c["type"] == type_ and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions") or [])


async def _wait_all(kc: kclient.Client, kind: resources.Kind, namespace: str, count: int,
                    test: Callable[[dict[str, Any]], bool], timeout: float,
                    on_poll: Callable[[list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        items = (await kc.list(kind, namespace)).items
        if on_poll is not None:
            on_poll(items)
        if len(items) >= count and all(test(o) for o in items):
            return items
        if time.monotonic() > deadline:
            waiting = [objects.name_of(o) for o in items if not test(o)]
            raise TimeoutError(f"{len(waiting)} {kind.kind}s still waiting after {timeout:.0f}s: {waiting[:10]}")
        await asyncio.sleep(0.5)


async def bench(root: Path, updates: int, workers: int, sleep: float, max_operations: int, timeout: float) -> None:
    os.environ.update(pulumi.pulumi_env(root / "pulumi"))
    with controlplane.start(root / "cluster") as cp, gitserver.running(root / "git") as git:
        async with kclient.Client.connect(lightkube.KubeConfig.from_file(str(cp.kubeconfig))) as kc:
            await operator.install_crds(kc)
            await operator.install_identity(kc)
            namespace = "bench"
            await operator.ensure_namespace(kc, namespace)
            commit = git.create_repo("sleepy", program(sleep))

            async with operator.running(cp.kubeconfig, root / "workspaces", workers=workers,
                                        max_operations=max_operations) as op:
                started = time.monotonic()
                workspaces = []
                for i in range(updates):
                    workspaces.append(await kc.create(resources.WORKSPACE.new(f"ws-{i:03d}", namespace, spec={
                        "git": {"url": git.http_url("sleepy"), "ref": commit},
                        "stacks": [{"name": f"s{i:03d}", "create": True}],
                    })))
                await _wait_all(kc, resources.WORKSPACE, namespace, updates, lambda o: _is(o, "Ready"), timeout)
                ready_seconds = time.monotonic() - started

                polled_peak = 0

                def count_progressing(items: list[dict[str, Any]]) -> None:
                    nonlocal polled_peak
                    polled_peak = max(polled_peak, sum(1 for o in items if _is(o, "Progressing")))

                started = time.monotonic()
                for i, ws in enumerate(workspaces):
                    update = resources.UPDATE.new(f"ws-{i:03d}-up", namespace, spec={
                        "workspaceName": objects.name_of(ws), "stackName": f"s{i:03d}", "type": "up",
                    })
                    await kc.create(owners.set_controller_reference(update, ws))
                done = await _wait_all(kc, resources.UPDATE, namespace, updates, lambda o: _is(o, "Complete"),
                                       timeout, on_poll=count_progressing)
                total_seconds = time.monotonic() - started
                assert op.controllers.updates.running == 0

    failed = [objects.name_of(o) for o in done if _is(o, "Failed")]
    intervals = [(_time(o["status"]["startTime"]), _time(o["status"]["endTime"])) for o in done]
    print(f"updates:               {updates} x {sleep:g} s sleep, workers={workers}, max operations={max_operations}")
    print(f"workspaces ready in:   {ready_seconds:.1f} s")
    print(f"all updates done in:   {total_seconds:.1f} s (from the first Update created to the last Complete)")
    print(f"peak concurrency:      {peak_overlap(intervals)} (Pulumi's start/end times), "
          f"{polled_peak} (polled Progressing=True)")
    print(f"failed:                {len(failed)} {failed[:10] if failed else ''}")
    if failed:
        sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=50)
    parser.add_argument("--workers", type=int, default=25)
    parser.add_argument("--sleep", type=float, default=5.0, help="seconds the program sleeps")
    parser.add_argument("--max-operations", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=900.0, help="per phase, seconds")
    parser.add_argument("--keep", action="store_true", help="keep the working directory (logs, state)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="pko-bench-updates-"))
    try:
        asyncio.run(bench(root, args.updates, args.workers, args.sleep, args.max_operations, args.timeout))
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
