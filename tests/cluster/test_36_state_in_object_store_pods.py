"""Stacks whose state lives in an S3-compatible object store (a real gofakes3 server at the node's address), as
self-managed users keep it: ``backend: s3://…?endpoint=…``, credentials from a Secret, secrets encrypted by the
passphrase provider. Every check reads the bucket itself.

- Two workspace pods of Stacks of different projects share the bucket: each stack's checkpoint is there, its secret
  config is stored encrypted by the passphrase provider, and no object of the bucket holds the plaintext.
- A workspace pod's agent container SIGKILLed mid-`up`: the Pulumi CLI dies without releasing its lock, which stays
  in the bucket. The Update ends Failed, the Stack retries, and the restarted agent, refused by that lock, sees that
  its holder was a CLI of its own pod (the StatefulSet's pod keeps its hostname) that is gone, releases it with
  `pulumi cancel` and runs the `up` again: the Stack is Ready and the bucket holds no lock (docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from pko.api import names
from pko.kube import client as kclient
from pko.kube import objects, resources
from pko.testing import cluster, crossrun, gitserver, objectstore, podprocs
from pko.testing.clusterbed import Release, diagnose, passphrase_env, workspace_template
from pko.testing.waiting import condition, eventually, wait_for

TOKEN = "s3cr3t-in-a-bucket-7f3a"  # the plaintext that must never be stored
SLOW_PROGRAM = """import time

import pulumi

for _ in range(40):  # long enough to be killed in the middle, short enough for the retry to finish
    time.sleep(0.5)
pulumi.export("done", pulumi.get_stack())
"""


async def _credentials(ckc: kclient.Client, ns: str, store: objectstore.ObjectStore) -> dict[str, Any]:
    """A Secret with the store's credentials, and the `envRefs` that hand them (and the passphrase) to the pod."""
    await ckc.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-creds", "namespace": ns},
                      "stringData": store.env()})
    refs = {key: {"type": "Secret", "secret": {"name": "s3-creds", "key": key}} for key in store.env()}
    return {**passphrase_env(), **refs}


def _ready_with(outputs: dict[str, Any]) -> Any:
    def test(obj: dict[str, Any]) -> bool:
        return (condition(obj, "Ready").get("status") == "True"
                and (obj.get("status") or {}).get("outputs") == outputs)
    return test


async def test_two_projects_share_one_bucket_with_their_secrets_encrypted(
        ckc: kclient.Client, cnamespace: str, real_cluster: cluster.Cluster, operator_release: Release,
        pod_store: objectstore.ObjectStore) -> None:
    ns = cnamespace
    env = await _credentials(ckc, ns, pod_store)
    await ckc.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "app-token", "namespace": ns},
                      "stringData": {"token": TOKEN}})
    prefix = f"tenant-{ns}"
    for name in ("alpha", "beta"):
        await ckc.create(resources.PROGRAM.new(name, ns, program={
            "configuration": {"token": {"type": "String"}},
            "outputs": {"project": name, "token": "${token}"},  # a secret output: stored encrypted
        }))
        await ckc.create(resources.STACK.new(name, ns, spec={
            "stack": "dev", "programRef": {"name": name}, "backend": pod_store.backend_url(prefix),
            "envRefs": env, "secretsRef": {"token": {"type": "Secret", "secret": {"name": "app-token",
                                                                                  "key": "token"}}},
            "workspaceTemplate": workspace_template(),
        }))
    for name in ("alpha", "beta"):
        await wait_for(ckc, resources.STACK, name, ns, _ready_with({"project": name, "token": "[secret]"}),
                       timeout=420, diagnostics=lambda: diagnose(real_cluster, ns))

    keys = pod_store.keys(f"{prefix}/")
    for name in ("alpha", "beta"):
        key = f"{prefix}/.pulumi/stacks/{name}/dev.json"
        assert key in keys, keys
        checkpoint = json.loads(pod_store.get(key))
        latest = checkpoint["checkpoint"]["latest"]
        assert latest["secrets_providers"]["type"] == "passphrase", latest["secrets_providers"]
        stack_resource = next(r for r in latest["resources"] if r["type"] == "pulumi:pulumi:Stack")
        assert "ciphertext" in stack_resource["outputs"]["token"], stack_resource["outputs"]  # encrypted at rest
    assert not [k for k in keys if "/locks/" in k], f"a finished update left a lock: {keys}"
    for key in keys:  # nothing in the bucket holds the plaintext, in any object
        assert TOKEN.encode() not in pod_store.get(key), key


async def test_a_lock_left_in_the_bucket_by_a_killed_cli_is_released_by_the_restarted_agent(
        ckc: kclient.Client, cnamespace: str, real_cluster: cluster.Cluster, operator_release: Release,
        pod_git: gitserver.GitServer, pod_store: objectstore.ObjectStore) -> None:
    ns = cnamespace
    env = await _credentials(ckc, ns, pod_store)
    repo = f"slow-s3-{ns}"
    commit = pod_git.create_repo(repo, {"Pulumi.yaml": crossrun.PYTHON_PROJECT,
                                        "requirements.txt": "pulumi>=3.0.0,<4.0.0\n", "__main__.py": SLOW_PROGRAM})
    prefix = f"tenant-{ns}"
    await ckc.create(resources.STACK.new("slow", ns, spec={
        "stack": "dev", "projectRepo": pod_git.http_url(repo), "commit": commit,
        "backend": pod_store.backend_url(prefix), "envRefs": env, "workspaceTemplate": workspace_template(),
        "retryPolicy": {"backoffBaseSeconds": 1, "backoffFactor": 1, "maxFailures": 3},
    }))

    def report() -> str:
        return diagnose(real_cluster, ns)

    locks_prefix = f"{prefix}/.pulumi/locks/"
    seen: dict[str, Any] = {}

    async def locked_by_a_live_cli() -> bool:
        pod = await ckc.get_or_none(resources.POD, "slow-workspace-0", ns)
        if pod is None or not pod.get("status", {}).get("containerStatuses"):
            return False
        held = await asyncio.to_thread(pod_store.keys, locks_prefix)
        if not held:
            return False
        locks = [await asyncio.to_thread(pod_store.get_or_none, key) for key in held]
        if None in locks:  # released between the listing and the read (a CLI command's own lock): look again
            return False
        pids = [json.loads(lock)["pid"] for lock in locks if lock is not None]
        holders = [podprocs.holder(pid, str(pod["metadata"]["uid"]), "up") for pid in pids]
        if not all(pid is not None for pid in holders):
            return False
        seen.update(pod=pod, held=held, holders=holders, argv=[podprocs.argv(pid) for pid in holders if pid],
                    containers={podprocs.container_of(pid) for pid in holders if pid})
        return None not in seen["containers"]

    try:
        await eventually(locked_by_a_live_cli, "the workspace pod's `pulumi up` to hold a lock in the bucket", 600,
                         interval=0.1)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{report()}") from None
    pod, held = seen["pod"], seen["held"]

    # killed at once, while the lock is seen held (waiting for anything else first, e.g. the Stack's status to name
    # the Update, let the CLI finish and release it on a busy machine)
    # the container the holder runs in, read from the process: the pod's status may lag a restart
    for container in seen["containers"]:
        real_cluster.ctr("task", "kill", "--signal", "SIGKILL", container)
    deadline = time.monotonic() + 30
    while not all(podprocs.dead(pid) for pid in seen["holders"]):
        assert time.monotonic() < deadline, "the CLI outlived its container's SIGKILL"
        await asyncio.sleep(0.01)
    if pod_store.keys(locks_prefix) != held:  # say what happened: the CLI's own log, and the store's
        killed = real_cluster.kubectl("logs", "-n", ns, "slow-workspace-0", "-c", "pulumi", "--previous",
                                      check=False).stdout[-3000:]
        statuses = [(s.get("containerID"), s.get("restartCount"), s.get("lastState"))
                    for s in pod["status"]["containerStatuses"]]
        raise AssertionError(f"a SIGKILLed CLI cannot release its lock, yet {held} is gone (holders {seen['holders']} "
                             f"running {seen['argv']} in {seen['containers']}, dead "
                             f"{time.monotonic() - deadline + 30:.2f}s after the kill; the pod's containers then: "
                             f"{statuses})\nthe killed container's log:\n{killed}\nthe store's "
                             f"log:\n{pod_store.log_path.read_text()[-2000:]}")
    # the Update whose CLI held the lock: the Stack's first (its name ends in the hex milliseconds of its creation)
    updates = (await ckc.list(resources.UPDATE, ns, labels={names.LABEL_STACK_NAME: "slow"})).items
    first = min((objects.name_of(u) for u in updates), key=lambda n: (len(n), n))

    failed = await wait_for(ckc, resources.UPDATE, first, ns,
                            lambda u: condition(u, "Complete").get("status") == "True", timeout=180,
                            diagnostics=report)
    assert condition(failed, "Failed").get("status") == "True", failed.get("status")

    done = await wait_for(ckc, resources.STACK, "slow", ns, _ready_with({"done": "dev"}), timeout=600,
                          diagnostics=report)
    assert done["status"]["lastUpdate"]["name"] != first, "the Stack did not retry with a new Update"
    now = await ckc.get(resources.POD, "slow-workspace-0", ns)
    assert now["metadata"]["uid"] == pod["metadata"]["uid"], "the retry ran in a new pod, not the restarted one"
    assert pod_store.keys(locks_prefix) == [], "the retry left a lock in the bucket"
    logs = real_cluster.kubectl("logs", "-n", ns, "slow-workspace-0", "-c", "pulumi", check=False).stdout
    for key in held:
        assert f"released the stack lock {key.rsplit('/', 1)[-1]}" in logs, f"the lock stayed:\n{logs[-3000:]}"
