"""Updates do not hold a controller worker while their Pulumi operation runs: with `workers=2`, 8 Updates of a
program that sleeps 5 s run at the same time (more than two of them at once is the proof). The Go operator runs
each operation inside `Reconcile`, so at most `MAX_CONCURRENT_RECONCILES` operations overlap there.

The overlap is measured from what Pulumi itself recorded (each Update's `status.startTime`/`endTime`), not from a
wall-clock budget. The 50 x 5 s figure with 25 workers is `bench/updates/run.py` (by hand: it needs the box)."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from pko.kube import client as kclient
from pko.kube import objects, owners, resources
from pko.testing import controlplane, gitserver, operator, waiting

WORKERS = 2
COUNT = 8
SLEEP_SECONDS = 5
PROGRAM = {
    "Pulumi.yaml": "name: sleepy\nruntime: python\ndescription: Sleeps, then exports how long it slept.\n",
    "__main__.py": (
        "import time\n\nimport pulumi\n\n"
        f"time.sleep({SLEEP_SECONDS})\n"
        f'pulumi.export("slept", {SLEEP_SECONDS})\n'
    ),
}


def peak_overlap(intervals: Sequence[tuple[datetime.datetime, datetime.datetime]]) -> int:
    """The largest number of intervals [start, end) that share an instant.

    Times on status have whole seconds, so each start is probed half a second in: an operation that really ended
    before another really started has end <= that start and is never counted as overlapping it."""
    probes = [start + datetime.timedelta(seconds=0.5) for start, _ in intervals]
    return max((sum(1 for s, e in intervals if s <= t < e) for t in probes), default=0)


def test_peak_overlap_counts_simultaneous_intervals() -> None:
    t = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)

    def at(seconds: int) -> datetime.datetime:
        return t + datetime.timedelta(seconds=seconds)

    assert peak_overlap([]) == 0
    assert peak_overlap([(at(0), at(5)), (at(5), at(10)), (at(10), at(15))]) == 1  # back to back
    assert peak_overlap([(at(0), at(5)), (at(1), at(6)), (at(4), at(9)), (at(6), at(11))]) == 3
    assert peak_overlap([(at(0), at(5))] * 7) == 7


def _time(value: str) -> datetime.datetime:
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


def _condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


async def _wait_all(kc: kclient.Client, kind: resources.Kind, namespace: str, names: Sequence[str],
                    test: Callable[[dict[str, Any]], bool], timeout: float, what: str) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    found: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        found = {objects.name_of(o): o for o in (await kc.list(kind, namespace)).items}
        if all(n in found and test(found[n]) for n in names):
            return found
        await asyncio.sleep(1)
    missing = [n for n in names if n not in found or not test(found[n])]
    sample = found.get(missing[0], {}).get("status") if missing else None
    raise AssertionError(f"{len(missing)} {kind.kind}s not {what} in {timeout:.0f}s: {missing}; "
                         f"first: {json.dumps(sample, indent=1)}")


@pytest.fixture
async def delete_our_objects(kc: kclient.Client, namespace: str) -> AsyncIterator[None]:
    """This control plane has no namespace controller: without this, the Workspaces would outlive the test and
    every later operator of the session would start agents for them."""
    yield
    for kind in (resources.UPDATE, resources.WORKSPACE):
        for obj in (await kc.list(kind, namespace)).items:
            await kc.delete(kind, objects.name_of(obj), namespace, missing_ok=True)


async def test_updates_overlap_beyond_the_worker_count(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, cluster: controlplane.ControlPlane,
    tmp_path: Path, pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, delete_our_objects: None,
) -> None:
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    repo = f"sleepy-{namespace}"
    commit = git.create_repo(repo, PROGRAM)
    workspaces = [f"ws-{i:02d}" for i in range(COUNT)]
    updates = [f"{name}-up" for name in workspaces]

    async with operator.running(cluster.kubeconfig, tmp_path / "workspaces", workers=WORKERS,
                                namespace=namespace) as op:
        created = []
        for i, name in enumerate(workspaces):
            # One backend for all: a stack each, so no operation waits for another's stack lock.
            created.append(await kc.create(resources.WORKSPACE.new(name, namespace, spec={
                "git": {"url": git.http_url(repo), "ref": commit},
                "stacks": [{"name": f"s{i:02d}", "create": True}],
            })))
        await _wait_all(kc, resources.WORKSPACE, namespace, workspaces,
                        lambda o: _condition(o, "Ready").get("status") == "True", timeout=240, what="Ready")

        for i, ws in enumerate(created):
            update = resources.UPDATE.new(updates[i], namespace, spec={
                "workspaceName": objects.name_of(ws), "stackName": f"s{i:02d}", "type": "up",
            })
            await kc.create(owners.set_controller_reference(update, ws))
        done = await _wait_all(kc, resources.UPDATE, namespace, updates,
                               lambda o: _condition(o, "Complete").get("status") == "True", timeout=240,
                               what="Complete")
        # an operation's task leaves the running set just after it wrote Complete: wait for that step, no longer
        await waiting.eventually(lambda: op.controllers.updates.running == 0, "every operation task to end", 30,
                                 interval=0.1)

    intervals = []
    for name in updates:
        status = done[name]["status"]
        assert _condition(done[name], "Failed").get("status") == "False", (name, status)
        start, end = _time(status["startTime"]), _time(status["endTime"])
        assert end - start >= datetime.timedelta(seconds=SLEEP_SECONDS - 1), (name, status)
        intervals.append((start, end))
        secret = await kc.get(resources.SECRET, status["outputs"], namespace)
        assert json.loads(base64.b64decode(secret["data"]["slept"])) == SLEEP_SECONDS

    peak = peak_overlap(intervals)
    print(f"peak overlap: {peak} of {COUNT} operations with {WORKERS} workers")  # shown with -s
    assert peak > WORKERS, f"at most {peak} of {COUNT} operations overlapped with {WORKERS} workers: {intervals}"
