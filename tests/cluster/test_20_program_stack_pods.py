"""A Program and a Stack on the `pod` runtime, as in production: the operator runs in a pod, the workspace
StatefulSet's pod copies pko's agent in (`bootstrap`), fetches the Program artifact from the operator's Service
(`fetch`, through CoreDNS), serves the agent through the workspace Service, and the Stack reaches Ready with
outputs; deleting it (`destroyOnFinalize`) destroys the stack and removes the pod."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import cluster
from pko.testing.clusterbed import Release, diagnose, passphrase_env, state_dir, workspace_template
from pko.testing.waiting import condition, eventually, wait_for, wait_gone


def _program(greeting: str) -> dict[str, Any]:
    return {"outputs": {"greeting": greeting, "token": {"fn::secret": "s3cr3t"}}}


def _ready_with(greeting: str):  # type: ignore[no-untyped-def]
    def test(obj: dict[str, Any]) -> bool:
        return (condition(obj, "Ready").get("status") == "True"
                and (obj.get("status") or {}).get("outputs", {}).get("greeting") == greeting)
    return test


def _resources(state: Path) -> list[dict[str, Any]]:
    """The resources of the stack in the file backend at `state` (none once it is removed)."""
    written = state / ".pulumi" / "stacks" / "hello" / "dev.json"
    if not written.exists():
        return []
    return list((json.loads(written.read_text())["checkpoint"].get("latest") or {}).get("resources") or [])


async def test_program_stack_in_workspace_pods(ckc: kclient.Client, cnamespace: str, real_cluster: cluster.Cluster,
                                               operator_release: Release, tmp_path: Path) -> None:
    ns = cnamespace
    # the backend on the node: the destroy runs in a pod of its own (its workspace has the project file only), which
    # must find the stack the ups wrote
    state = state_dir(tmp_path, "state")
    pod = {"volumes": [{"name": "state", "hostPath": {"path": str(state), "type": "Directory"}}],
           "containers": [{"name": "pulumi", "volumeMounts": [{"name": "state", "mountPath": "/state"}]}]}
    await ckc.create(resources.PROGRAM.new("hello", ns, program=_program("hello from a pod")))
    await ckc.create(resources.STACK.new("hello", ns, spec={
        "stack": "dev", "programRef": {"name": "hello"}, "backend": "file:///state",
        "envRefs": passphrase_env(), "destroyOnFinalize": True,
        "workspaceTemplate": workspace_template(podTemplate={"spec": pod}),
    }))
    try:
        stack = await wait_for(ckc, resources.STACK, "hello", ns, _ready_with("hello from a pod"), timeout=400)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{diagnose(real_cluster, ns)}") from None
    assert stack["status"]["outputs"]["token"] == "[secret]"
    assert stack["status"]["lastUpdate"]["state"] == "succeeded"

    # the workspace pod ran both init containers with pko's image and serves the agent through its Service
    pod = await ckc.get(resources.POD, "hello-workspace-0", ns)
    inits = {c["name"]: c for c in pod["spec"]["initContainers"]}
    assert inits["bootstrap"]["image"] == "docker.io/pko/pko:1"
    assert {s["name"]: s["state"].get("terminated", {}).get("exitCode") for s in pod["status"]["initContainerStatuses"]
            } == {"bootstrap": 0, "fetch": 0}
    assert pod["status"]["phase"] == "Running"
    workspace = await ckc.get(resources.WORKSPACE, "hello", ns)
    assert workspace["status"]["address"].startswith(f"hello-workspace.{ns}")
    endpoints = real_cluster.api_get(f"/api/v1/namespaces/{ns}/endpoints/hello-workspace") or {}
    assert endpoints.get("subsets"), "the workspace Service has the pod as its endpoint"

    # a second update in the same pod
    program = await ckc.get(resources.PROGRAM, "hello", ns)
    program["program"] = _program("hello again")
    await ckc.replace(program)
    stack = await wait_for(ckc, resources.STACK, "hello", ns, _ready_with("hello again"), timeout=300)
    assert stack["status"]["lastUpdate"]["lastSuccessfulCommit"] == "2"

    assert _resources(state), "the ups wrote no resources to the node's backend"

    # delete: destroy runs in the pod, then the Workspace, StatefulSet and pod go away
    await ckc.delete(resources.STACK, "hello", ns)
    await wait_gone(ckc, resources.STACK, "hello", ns, 300)
    await wait_gone(ckc, resources.POD, "hello-workspace-0", ns, 120)
    # two ups and the destroy each succeeded (events outlive the Updates, which go with their Stack); the Update
    # controller posts each event after the Update's status, which the Stack may act on first: waited for
    succeeded: set[str] = set()

    def all_posted() -> bool:
        events = (real_cluster.api_get(f"/api/v1/namespaces/{ns}/events") or {}).get("items", [])
        succeeded.clear()
        succeeded.update(e["involvedObject"]["name"] for e in events
                         if e["reason"] == "UpdateSucceeded" and e["involvedObject"]["kind"] == "Update")
        return len(succeeded) >= 3

    try:
        await eventually(all_posted, "an UpdateSucceeded event of each of the three Updates", timeout=60, interval=1)
    except AssertionError as err:
        raise AssertionError(f"{err}: {sorted(succeeded)}") from None
    assert len(succeeded) == 3, sorted(succeeded)
    # the destroy emptied the stack the ups wrote (not a new, empty one of its own pod)
    assert not _resources(state), "the destroy left the stack's resources"
