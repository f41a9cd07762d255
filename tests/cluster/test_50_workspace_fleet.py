"""pko's workspace fleet features in real pods (docs/config-without-restart.md, docs/scale-to-zero.md).

A config-only change of a Program Stack runs its Update in the *same* workspace pod: the pod's UID, its `pulumi`
container's restart count, the StatefulSet's generation and its controller revision are unchanged, and the
Workspace's `status.applied` says the agent has the new generation's values. With `workspaceIdleTimeout` the
idle workspace then scales to zero (StatefulSet `replicas: 0`, no pod, Workspace `Ready=True/Sleeping`, the Stack
still Ready), and a resync brings a new pod back that runs the Update. A meaningless idle timeout is refused by the
API server with its message."""

from __future__ import annotations

import asyncio
import datetime
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pko.kube import client as kclient
from pko.kube import errors, resources
from pko.testing import cluster
from pko.testing.clusterbed import Release, diagnose, passphrase_env, workspace_template
from pko.testing.waiting import condition, eventually, wait_for, wait_gone

ANNOTATION_RECONCILE_REQUEST = "pulumi.com/reconciliation-request"
KUBECTL_PKO = Path(sys.executable).parent / "kubectl-pko"
#: A Pulumi YAML program that exports the config value it is given.
PROGRAM = {"configuration": {"greeting": {"type": "String"}}, "outputs": {"greeting": "${greeting}"}}


def _ready_with(greeting: str, request: str | None = None):  # type: ignore[no-untyped-def]
    """The Stack is Ready at its current generation (and sync request), with `greeting` as its output."""
    def test(obj: dict[str, Any]) -> bool:
        status = obj.get("status") or {}
        last = status.get("lastUpdate") or {}
        return (condition(obj, "Ready").get("status") == "True"
                and status.get("observedGeneration") == obj["metadata"]["generation"]
                and last.get("generation") == obj["metadata"]["generation"]
                and (request is None or last.get("reconcileRequest") == request)
                and (status.get("outputs") or {}).get("greeting") == greeting)
    return test


def _pulumi_restarts(pod: dict[str, Any]) -> int:
    return next(int(s.get("restartCount", 0)) for s in pod["status"]["containerStatuses"] if s["name"] == "pulumi")


LOG_MARGIN = 3.0  # how far before an Update's creation `kubectl pko logs` starts reading (pko.cli.ctl.view.log_since)


async def _running_for(ckc: kclient.Client, ns: str, seconds: float) -> None:
    """Until the workspace pod's `pulumi` container has been running for `seconds`."""
    pod = await ckc.get(resources.POD, "fleet-workspace-0", ns)
    started = next(s["state"]["running"]["startedAt"] for s in pod["status"]["containerStatuses"]
                   if s["name"] == "pulumi" and "running" in (s.get("state") or {}))
    since = datetime.datetime.fromisoformat(started.replace("Z", "+00:00"))
    left = seconds - (datetime.datetime.now(datetime.UTC) - since).total_seconds()
    if left > 0:
        await asyncio.sleep(left)


async def _pod_state(ckc: kclient.Client, ns: str) -> tuple[str, int, int, str, str]:
    """What a new or restarted pod would change: the pod's UID, its `pulumi` container's restart count, the
    StatefulSet's generation and its update and current controller revisions."""
    pod = await ckc.get(resources.POD, "fleet-workspace-0", ns)
    sts = await ckc.get(resources.STATEFUL_SET, "fleet-workspace", ns)
    return (pod["metadata"]["uid"], _pulumi_restarts(pod), sts["metadata"]["generation"],
            sts["status"]["updateRevision"], sts["status"]["currentRevision"])


async def test_a_config_change_keeps_the_pod_and_an_idle_workspace_sleeps(
    ckc: kclient.Client, cnamespace: str, real_cluster: cluster.Cluster, operator_release: Release,
) -> None:
    ns = cnamespace
    await ckc.create(resources.PROGRAM.new("fleet", ns, program=PROGRAM))
    await ckc.create(resources.STACK.new("fleet", ns, spec={
        "stack": "dev", "programRef": {"name": "fleet"}, "backend": "file:///tmp",
        "envRefs": passphrase_env(), "config": {"greeting": "one"},
        "workspaceTemplate": workspace_template(),
    }))
    try:
        await wait_for(ckc, resources.STACK, "fleet", ns, _ready_with("one"), timeout=400)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{diagnose(real_cluster, ns)}") from None
    before = await _pod_state(ckc, ns)
    workspace = await ckc.get(resources.WORKSPACE, "fleet", ns)
    placed_at = workspace["status"]["applied"]["podGeneration"]

    # `kubectl pko logs` reads from a moment before the Update's creation (view.log_since: up to 3 s, for a node
    # clock behind the API server's): a pod that started less than that before the next Update shows its start-up
    # in that window, which the check below rules out (a fresh-clone run: pod start to config change in 1.9 s).
    await _running_for(ckc, ns, LOG_MARGIN + 1)
    # Config only: the Update runs in the same pod; nothing about the StatefulSet changes.
    await ckc.patch(resources.STACK, "fleet", {"spec": {"config": {"greeting": "two"}}}, ns)
    try:
        await wait_for(ckc, resources.STACK, "fleet", ns, _ready_with("two"), timeout=300)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{diagnose(real_cluster, ns)}") from None
    assert await _pod_state(ckc, ns) == before, "a config-only change restarted or replaced the workspace pod"
    workspace = await ckc.get(resources.WORKSPACE, "fleet", ns)
    applied = workspace["status"]["applied"]
    assert applied["podGeneration"] == placed_at < workspace["metadata"]["generation"]
    assert applied["configGeneration"] == workspace["metadata"]["generation"]
    revisions = (real_cluster.api_get(f"/apis/apps/v1/namespaces/{ns}/controllerrevisions") or {}).get("items", [])
    owned = [r["metadata"]["name"] for r in revisions
             if any(o.get("name") == "fleet-workspace" for o in r["metadata"].get("ownerReferences") or ())]
    assert owned == [before[3]], f"the StatefulSet got another pod template: {owned}"

    # `kubectl pko logs` reads the pod's log from this Update on: the CLI's output of this update, not the agent's
    # start-up nor the first update, which the same pod logged before; with -f it ends as the Update is complete.
    for follow in ([], ["-f"]):
        shown = await asyncio.to_thread(
            subprocess.run, [str(KUBECTL_PKO), "logs", "fleet", "-n", ns, *follow, "--kubeconfig",
                             str(real_cluster.kubeconfig)], capture_output=True, text=True, timeout=120, check=False)
        assert shown.returncode == 0, shown.stderr
        assert "workspace pod" in shown.stderr
        assert '"two"' in shown.stdout, shown.stdout
        assert "server listening" not in shown.stdout, shown.stdout

    # Scale to zero: the idle timeout is not part of the pod (the update it causes runs in the same pod), then the
    # workspace sleeps; the Stack stays Ready.
    await ckc.patch(resources.STACK, "fleet", {"spec": {"workspaceIdleTimeout": "5s"}}, ns)
    await wait_for(ckc, resources.STACK, "fleet", ns, _ready_with("two"), timeout=300)
    try:
        workspace = await wait_for(ckc, resources.WORKSPACE, "fleet", ns,
                                   lambda o: condition(o, "Ready").get("reason") == "Sleeping", timeout=180)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{diagnose(real_cluster, ns)}") from None
    assert condition(workspace, "Ready")["status"] == "True"
    assert "address" not in workspace["status"]
    # the Workspace says Sleeping first, then scales its StatefulSet down (an Update created meanwhile wakes it)
    sts = await wait_for(ckc, resources.STATEFUL_SET, "fleet-workspace", ns,
                         lambda o: o["spec"]["replicas"] == 0, timeout=60)
    assert sts["status"]["updateRevision"] == before[3], "sleeping changed the pod template"
    await wait_gone(ckc, resources.POD, "fleet-workspace-0", ns, 700)  # the agent's grace period is 600s
    stack = await ckc.get(resources.STACK, "fleet", ns)
    assert _ready_with("two")(stack)

    # A resync wakes it: a new pod runs the Update, then the workspace sleeps again.
    await ckc.patch(resources.STACK, "fleet", {"metadata": {"annotations": {ANNOTATION_RECONCILE_REQUEST: "wake"}}},
                    ns)
    try:
        woken = await wait_for(ckc, resources.POD, "fleet-workspace-0", ns,
                               lambda o: o["metadata"]["uid"] != before[0], timeout=300, interval=0.5)
        stack = await wait_for(ckc, resources.STACK, "fleet", ns, _ready_with("two", request="wake"), timeout=400)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{diagnose(real_cluster, ns)}") from None
    assert stack["status"]["lastUpdate"]["state"] == "succeeded"
    assert woken["metadata"]["labels"]["controller-revision-hash"] == before[3]
    await wait_for(ckc, resources.WORKSPACE, "fleet", ns,
                   lambda o: condition(o, "Ready").get("reason") == "Sleeping", timeout=180)
    # the config change, and the idle timeout's new Workspace generation (its values applied again, same pod); the
    # Sleeping event comes after the status and the scale-down (CI read the events in between once)
    reasons: list[str] = []

    async def every_event() -> bool:
        events = (real_cluster.api_get(f"/api/v1/namespaces/{ns}/events") or {}).get("items", [])
        reasons[:] = [e["reason"] for e in events if e["involvedObject"].get("kind") == "Workspace"
                      for _ in range(int(e.get("count") or 1))]  # an Event told again is one object with a count
        return (reasons.count("ConfigApplied") >= 1 and reasons.count("Waking") >= 1
                and reasons.count("Sleeping") >= 2)

    try:
        await eventually(every_event, "the Workspace's events", timeout=60, interval=1)
    except AssertionError as err:
        raise AssertionError(f"{err}: {reasons}") from None


@pytest.mark.parametrize("value", ["soon", "-1h"])
async def test_a_meaningless_idle_timeout_is_refused(ckc: kclient.Client, cnamespace: str, value: str) -> None:
    with pytest.raises(errors.Invalid) as refused:
        await ckc.create(resources.STACK.new("bad-idle", cnamespace, spec={
            "stack": "dev", "programRef": {"name": "fleet"}, "workspaceIdleTimeout": value}))
    assert "spec.workspaceIdleTimeout" in refused.value.message
    assert "workspaceIdleTimeout must be a duration such as 15m, 1h30m or 90s" in refused.value.message
