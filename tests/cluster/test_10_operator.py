"""pko as users install it: the image built from the Dockerfile, the Helm chart, a pod that passes its probes,
holds the leader Lease and serves metrics through its Service."""

from __future__ import annotations

import urllib.request

from pko.testing import cluster
from pko.testing.clusterbed import OPERATOR_NAMESPACE, OPERATOR_TAG, Release, diagnose


def _operator_pod(real_cluster: cluster.Cluster) -> dict:  # type: ignore[type-arg]
    pods = real_cluster.api_get(f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods") or {}
    running = [p for p in pods.get("items", []) if p["metadata"].get("deletionTimestamp") is None]
    assert len(running) == 1, diagnose(real_cluster, OPERATOR_NAMESPACE)
    return running[0]


def test_operator_pod_runs_the_built_image_and_is_ready(real_cluster: cluster.Cluster,
                                                        operator_release: Release) -> None:
    pod = _operator_pod(real_cluster)
    container = pod["spec"]["containers"][0]
    assert container["image"] == f"docker.io/pko/pko:{OPERATOR_TAG}"  # a numeric tag, rendered as written
    ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}.get("Ready")
    assert ready == "True", diagnose(real_cluster, OPERATOR_NAMESPACE)
    status = pod["status"]["containerStatuses"][0]
    assert status["restartCount"] == 0, diagnose(real_cluster, OPERATOR_NAMESPACE)
    # the image's user, not root
    assert pod["spec"]["securityContext"].get("runAsNonRoot") or container.get("securityContext", {}).get(
        "runAsNonRoot")


def test_operator_holds_the_lease(real_cluster: cluster.Cluster, operator_release: Release) -> None:
    lease = real_cluster.api_get(
        f"/apis/coordination.k8s.io/v1/namespaces/{OPERATOR_NAMESPACE}/leases/operator.pulumi.com")
    assert lease is not None, diagnose(real_cluster, OPERATOR_NAMESPACE)
    assert lease["spec"]["holderIdentity"].startswith(_operator_pod(real_cluster)["metadata"]["name"])


def test_metrics_through_the_service(real_cluster: cluster.Cluster, operator_release: Release) -> None:
    services = real_cluster.api_get(f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/services") or {}
    service = next(s for s in services["items"]
                   if any(p["name"] == "http-metrics" for p in s["spec"].get("ports", [])))
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "http-metrics")
    # a ClusterIP, through kube-proxy's rules, from this machine
    with urllib.request.urlopen(f"http://{service['spec']['clusterIP']}:{port}/metrics", timeout=10) as response:
        body = response.read().decode()
    assert "controller_runtime_reconcile_total" in body
    assert 'pulumi_stacks_active' in body or "workqueue_depth" in body
