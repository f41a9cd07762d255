"""A workspace pod's faults in the middle of an `up` (docs/reliability.md), on the `pod` runtime.

- The agent container SIGKILLed (the container's init process dies, so the kernel kills everything in it, the
  Pulumi CLI included, with no chance to clean up): the CLI's lock stays in the backend, which lives in the pod's
  `share` volume and so survives the container's restart. The Update ends Failed with a message, the Stack retries
  per its policy, and the restarted agent releases the dead CLI's lock before its `up` (pko.agent.stalelocks: the
  pod's hostname is stable, the lock's pid is no running CLI), so the retry succeeds in the same pod.
- The pod deleted (SIGTERM, then the grace period): the agent cancels the CLI, which releases its lock before the
  pod's volume goes; the Update ends Failed and the retry runs in the StatefulSet's new pod.

The lock files are read on the node, in the kubelet's directory of the pod's `share` volume. The SIGKILL lands only
while the lock is held by the live CLI that took it (the lock's pid, seen in /proc on the node in the pod's
cgroup), and the lock is read again as soon as that CLI is dead, before the container can restart: the restarted
agent releases it before the retry's `up`, and says so in its log.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import cluster, crossrun, filebackend, gitserver, podprocs
from pko.testing.clusterbed import Release, diagnose, passphrase_env, workspace_template
from pko.testing.waiting import condition, eventually, wait_for

SLOW_PROGRAM = """import time

import pulumi

for _ in range(40):  # long enough to be interrupted in the middle, short enough for the retry to finish
    time.sleep(0.5)
pulumi.export("done", pulumi.get_stack())
"""


def _share(real_cluster: cluster.Cluster, pod: dict[str, Any]) -> Path:
    """The pod's `share` volume (an emptyDir) on the node."""
    volumes = real_cluster.paths.kubelet_root / "pods" / str(pod["metadata"]["uid"]) / "volumes"
    return volumes / "kubernetes.io~empty-dir" / "share"


def _holder(lock: Path, pod_uid: str) -> int | None:
    """The node's pid of the live `pulumi up` in the pod `pod_uid` that holds `lock` (the lock names the CLI's pid in
    its container), if it is alive."""
    try:
        pid_in_pod = json.loads(lock.read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return None
    return podprocs.holder(pid_in_pod, pod_uid, "up")


@pytest.mark.parametrize("fault", ["container-sigkill", "pod-deleted"])
async def test_a_workspace_pod_fault_mid_update(ckc: kclient.Client, cnamespace: str, real_cluster: cluster.Cluster,
                                                operator_release: Release, pod_git: gitserver.GitServer,
                                                fault: str) -> None:
    ns = cnamespace
    repo = f"slow-{ns}"
    commit = pod_git.create_repo(repo, {"Pulumi.yaml": crossrun.PYTHON_PROJECT,
                                        "requirements.txt": "pulumi>=3.0.0,<4.0.0\n", "__main__.py": SLOW_PROGRAM})
    await ckc.create(resources.STACK.new("slow", ns, spec={
        "stack": "dev", "projectRepo": pod_git.http_url(repo), "commit": commit, "backend": "file:///share",
        "envRefs": passphrase_env(), "workspaceTemplate": workspace_template(),
        "retryPolicy": {"backoffBaseSeconds": 1, "backoffFactor": 1, "maxFailures": 3},
    }))

    def report() -> str:
        return diagnose(real_cluster, ns)

    # the `up` runs and its live CLI holds the stack's lock
    seen: dict[str, Any] = {}

    async def locked() -> bool:
        pod = await ckc.get_or_none(resources.POD, "slow-workspace-0", ns)
        if pod is None or not pod.get("status", {}).get("containerStatuses"):
            return False
        held = filebackend.locks(_share(real_cluster, pod))
        holders = [_holder(lock, str(pod["metadata"]["uid"])) for lock in held]
        seen["pod"], seen["locks"], seen["holders"] = pod, held, holders
        return bool(held) and all(pid is not None for pid in holders)

    try:
        await eventually(locked, "the workspace pod's `pulumi up` to hold the stack's lock", 600, interval=0.1)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{report()}") from None
    pod, held = seen["pod"], seen["locks"]
    share = _share(real_cluster, pod)
    stack = await ckc.get(resources.STACK, "slow", ns)
    current = (stack.get("status") or {}).get("currentUpdate")
    if not current:  # seen once under CI load: say what the Stack and its Updates were, not a KeyError
        updates = (await ckc.list(resources.UPDATE, ns)).items
        raise AssertionError(
            f"a live CLI holds the lock but the Stack runs no Update: status={stack.get('status')}\n"
            + "\n".join(f"Update {u['metadata']['name']}: {u.get('status')}" for u in updates)
            + f"\n{report()}")
    first = current["name"]

    if fault == "container-sigkill":
        # the container the holder runs in, read from the process: the pod's status may lag a restart
        for container in {podprocs.container_of(pid) or podprocs.container_id(pod) for pid in seen["holders"]}:
            real_cluster.ctr("task", "kill", "--signal", "SIGKILL", container)
        # the CLI died with its container: its lock is left in the volume, which the restarted container keeps
        deadline = time.monotonic() + 30
        while not all(podprocs.dead(pid) for pid in seen["holders"]):
            assert time.monotonic() < deadline, "the CLI outlived its container's SIGKILL"
            await asyncio.sleep(0.01)
        left = [p.name for p in filebackend.locks(share)]
        assert left == [p.name for p in held], "a SIGKILLed CLI cannot release its lock"
    else:
        real_cluster.kubectl("delete", "pod", "-n", ns, "slow-workspace-0", "--wait=false")
        # SIGTERM: the agent cancels the CLI, which releases its lock while the volume is still there
        released: list[bool] = []

        def gone_or_released() -> bool:
            if (share / ".pulumi").is_dir() and not filebackend.locks(share):
                released.append(True)
            return bool(released) or not share.is_dir()

        await eventually(gone_or_released, "the CLI to release its lock or the pod's volume to go", 90, interval=0.05)
        assert released, "the pod's volume went with the stack still locked: the CLI was not cancelled"

    failed = await wait_for(ckc, resources.UPDATE, first, ns,
                            lambda u: condition(u, "Complete").get("status") == "True", timeout=180,
                            diagnostics=report)
    assert condition(failed, "Failed").get("status") == "True", failed.get("status")
    message = condition(failed, "Failed").get("message") or failed["status"].get("message") or ""
    assert message, f"the interrupted Update says nothing about why: {failed.get('status')}"

    done = await wait_for(ckc, resources.STACK, "slow", ns, lambda o: (
        condition(o, "Ready").get("status") == "True" and (o.get("status") or {}).get("outputs") == {"done": "dev"}),
        timeout=600, diagnostics=report)
    assert done["status"]["lastUpdate"]["name"] != first, "the Stack did not retry with a new Update"
    now = await ckc.get(resources.POD, "slow-workspace-0", ns)
    if fault == "container-sigkill":
        assert now["metadata"]["uid"] == pod["metadata"]["uid"], "the retry ran in a new pod, not the restarted one"
        assert filebackend.locks(share) == [], "the retry left a lock"
        logs = real_cluster.kubectl("logs", "-n", ns, "slow-workspace-0", "-c", "pulumi", check=False).stdout
        for path in held:
            assert f"released the stack lock {path.name}" in logs, f"the lock stayed:\n{logs[-3000:]}"
    else:
        assert now["metadata"]["uid"] != pod["metadata"]["uid"]
        assert filebackend.locks(_share(real_cluster, now)) == []
    # the Update controller posts the event after the Update's status, which the Stack may act on first: waited for
    stack_events: list[dict[str, Any]] = []

    async def failure_posted() -> bool:
        stack_events[:] = [e for e in (await ckc.list(resources.EVENT, ns)).items
                           if e["involvedObject"].get("name") == first]
        return any(e.get("reason") == "UpdateFailed" for e in stack_events)

    try:
        await eventually(failure_posted, f"an UpdateFailed event of Update {first}", 60, interval=1)
    except AssertionError as err:
        raise AssertionError(f"{err}: {json.dumps(stack_events)[-2000:]}") from None
