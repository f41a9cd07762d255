"""Security on a real node: workspace pods run under the `restricted` profile (non-root, read-only token mount),
a Workspace that asks for root under that profile fails with the kubelet's reason instead of crash-looping, and
the agent's RPC refuses callers from other pods without the right token (TokenReview + SubjectAccessReview by the
real API server)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import cluster
from pko.testing.clusterbed import Release, diagnose, passphrase_env, workspace_template
from pko.testing.waiting import condition, wait_for

TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                        "runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
CALLER = """
import grpc, json, sys
target = sys.argv[1]
def call(path):
    token = open(path).read().strip() if path else None
    channel = grpc.insecure_channel(target)
    grpc.channel_ready_future(channel).result(timeout=60)
    metadata = [("authorization", "Bearer " + token)] if token else []
    method = channel.unary_unary("/agent.AutomationService/WhoAmI", request_serializer=lambda m: b"",
                                 response_deserializer=lambda b: b)
    try:
        method(b"", metadata=metadata, timeout=30)
        return "OK"
    except grpc.RpcError as err:
        return err.code().name
print(json.dumps({"none": call(None), "apiserver-audience": call(sys.argv[2] + "/token"),
                  "workspace-audience": call("/agent-token/token")}))
"""


@pytest.fixture
async def secured(ckc: kclient.Client, cnamespace: str, real_cluster: cluster.Cluster,
                  operator_release: Release) -> str:
    """A Ready Stack whose workspace pod runs; returns its namespace."""
    ns = cnamespace
    await ckc.create(resources.PROGRAM.new("sec", ns, program={"outputs": {"ok": "yes"}}))
    await ckc.create(resources.STACK.new("sec", ns, spec={
        "stack": "dev", "programRef": {"name": "sec"}, "backend": "file:///tmp", "envRefs": passphrase_env(),
        "workspaceTemplate": workspace_template(),
    }))
    try:
        await wait_for(ckc, resources.STACK, "sec", ns, lambda o: condition(o, "Ready").get("status") == "True",
                       timeout=400)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{diagnose(real_cluster, ns)}") from None
    return ns


async def test_workspace_pod_runs_restricted(ckc: kclient.Client, secured: str, real_cluster: cluster.Cluster) -> None:
    pod = await ckc.get(resources.POD, "sec-workspace-0", secured)
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    pulumi = next(c for c in pod["spec"]["containers"] if c["name"] == "pulumi")
    assert pulumi["securityContext"]["allowPrivilegeEscalation"] is False
    assert "ALL" in pulumi["securityContext"]["capabilities"]["drop"]
    token_mounts = [m for m in pulumi.get("volumeMounts", []) if m["mountPath"] == TOKEN_DIR]
    assert token_mounts
    assert all(m.get("readOnly") for m in token_mounts)
    # what the kubelet really did
    uid = real_cluster.kubectl("exec", "-n", secured, "sec-workspace-0", "-c", "pulumi", "--", "id", "-u").stdout
    assert uid.strip() == "1000"
    write = real_cluster.kubectl("exec", "-n", secured, "sec-workspace-0", "-c", "pulumi", "--",
                                 "touch", f"{TOKEN_DIR}/planted", check=False)
    assert write.returncode != 0
    assert "Read-only file system" in write.stderr


async def test_root_under_restricted_fails_clearly(ckc: kclient.Client, cnamespace: str,
                                                   operator_release: Release, real_cluster: cluster.Cluster) -> None:
    ns = cnamespace
    await ckc.create({
        "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace", "metadata": {"name": "rooted", "namespace": ns},
        "spec": {"securityProfile": "restricted", "image": "docker.io/pulumi/pulumi:3.259.0-nonroot",
                 "imagePullPolicy": "IfNotPresent", "local": {"dir": "/home/pulumi"},
                 "resources": {"requests": {"cpu": "10m"}},
                 "podTemplate": {"spec": {"containers": [{"name": "pulumi", "securityContext": {"runAsUser": 0}}]}}},
    })

    def explained(obj: dict[str, Any]) -> bool:
        return "non-root" in condition(obj, "Ready").get("message", "")

    try:
        workspace = await wait_for(ckc, resources.WORKSPACE, "rooted", ns, explained, timeout=180)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{diagnose(real_cluster, ns)}") from None
    ready = condition(workspace, "Ready")
    assert ready["status"] == "False"
    assert ready["reason"] == "WaitingForReplicas"
    assert "CreateContainerConfigError" in ready["message"]
    pod = await ckc.get(resources.POD, "rooted-workspace-0", ns)
    assert all(s.get("restartCount", 0) == 0 for s in pod["status"].get("containerStatuses", [])), "no crash loop"
    events = (real_cluster.api_get(f"/api/v1/namespaces/{ns}/events") or {}).get("items", [])
    assert any(e["reason"] == "PodFailure" and e["involvedObject"]["name"] == "rooted" for e in events)


async def test_a_workspace_pod_a_quota_refuses_is_named_in_the_status_and_starts_once_the_quota_allows_it(
        ckc: kclient.Client, cnamespace: str, operator_release: Release, real_cluster: cluster.Cluster) -> None:
    """No pod at all: the API server refused the StatefulSet's pod (here a ResourceQuota; a LimitRange, the
    namespace's Pod Security level or a webhook alike), which only the StatefulSet's FailedCreate event says. The
    Workspace and the Stack quote that refusal instead of waiting for a pod in silence; with room made, the Stack
    is Ready."""
    ns = cnamespace
    real_cluster.kubectl("create", "quota", "no-pods", "--hard=pods=0", "-n", ns)
    await ckc.create(resources.PROGRAM.new("q", ns, program={"outputs": {"ok": "yes"}}))
    await ckc.create(resources.STACK.new("q", ns, spec={
        "stack": "dev", "programRef": {"name": "q"}, "backend": "file:///tmp", "envRefs": passphrase_env(),
        "workspaceTemplate": workspace_template(),
    }))
    refusal = 'pod not created: pods "q-workspace-0" is forbidden: exceeded quota: no-pods'
    try:
        stack = await wait_for(ckc, resources.STACK, "q", ns,
                               lambda o: refusal in condition(o, "Reconciling").get("message", ""), timeout=180)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{diagnose(real_cluster, ns)}") from None
    assert condition(stack, "Ready")["status"] == "False"
    workspace = await ckc.get(resources.WORKSPACE, "q", ns)
    ready = condition(workspace, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "WaitingForReplicas")
    assert ready["message"].startswith(f"Waiting for the workspace pod to be available: {refusal}"), ready
    events = (real_cluster.api_get(f"/api/v1/namespaces/{ns}/events") or {}).get("items", [])
    assert any(e["reason"] == "PodFailure" and e["involvedObject"]["name"] == "q" and refusal in e["message"]
               for e in events)

    real_cluster.kubectl("delete", "quota", "no-pods", "-n", ns)
    try:
        stack = await wait_for(ckc, resources.STACK, "q", ns,
                               lambda o: condition(o, "Ready").get("status") == "True", timeout=400)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{diagnose(real_cluster, ns)}") from None
    assert stack["status"]["outputs"] == {"ok": "yes"}


def _caller_pod(name: str, namespace: str, service_account: str, audience: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "serviceAccountName": service_account, "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "caller", "image": "docker.io/pko/pko:1", "imagePullPolicy": "IfNotPresent",
                "command": ["/opt/pko/bin/python", "-c", CALLER, f"sec-workspace.{namespace}:50051", TOKEN_DIR],
                "securityContext": RESTRICTED_CONTAINER,
                "volumeMounts": [{"name": "agent-token", "mountPath": "/agent-token", "readOnly": True}],
            }],
            "volumes": [{"name": "agent-token", "projected": {"sources": [
                {"serviceAccountToken": {"audience": audience, "expirationSeconds": 600, "path": "token"}}]}}],
        },
    }


async def test_agent_refuses_callers_without_the_right_token(ckc: kclient.Client, secured: str,
                                                             real_cluster: cluster.Cluster) -> None:
    ns = secured
    for account in ("intruder", "friend"):
        await ckc.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": ns}})
    # `friend` may use the workspace's RPC, as the operator's own account may: the positive control
    real_cluster.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "rpc", "namespace": ns},
        "rules": [{"apiGroups": ["auto.pulumi.com"], "resources": ["workspaces/rpc"], "verbs": ["use"]}]}))
    real_cluster.kubectl("create", "rolebinding", "rpc", "-n", ns, "--role=rpc", f"--serviceaccount={ns}:friend")
    for account in ("intruder", "friend"):
        await ckc.create(_caller_pod(account, ns, account, f"sec.{ns}"))
    results = {}
    for account in ("intruder", "friend"):
        pod = await wait_for(ckc, resources.POD, account, ns,
                             lambda o: (o.get("status") or {}).get("phase") in ("Succeeded", "Failed"), timeout=180)
        logs = real_cluster.kubectl("logs", "-n", ns, account).stdout
        assert pod["status"]["phase"] == "Succeeded", f"{logs}\n{diagnose(real_cluster, ns)}"
        results[account] = json.loads(logs.strip().splitlines()[-1])
    assert results["intruder"] == {"none": "UNAUTHENTICATED", "apiserver-audience": "UNAUTHENTICATED",
                                   "workspace-audience": "PERMISSION_DENIED"}
    assert results["friend"]["workspace-audience"] == "OK"
    assert results["friend"]["none"] == "UNAUTHENTICATED"
