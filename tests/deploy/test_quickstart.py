"""deploy/quickstart/install.yaml: generated from the chart (no drift), with the reference quickstart's objects."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from helmchart import ROOT, load_all

from pko.api import crds
from pko.deploy import quickstart

NS = "pulumi-kubernetes-operator"


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return load_all((ROOT / quickstart.OUTPUT).read_text())


def by_key(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects}


def test_committed_quickstart_is_what_the_generator_writes(helm: Path) -> None:
    assert quickstart.drift(helm, ROOT) == [], "run `python -m pko.deploy.quickstart` and commit the result"


def test_drift_is_detected(helm: Path, tmp_path: Path) -> None:
    """The check above can fail: a hand edit of install.yaml, a chart change and a stale CRD copy all show."""
    for part in ("deploy/helm", "deploy/quickstart"):
        shutil.copytree(ROOT / part, tmp_path / part)
    assert quickstart.drift(helm, tmp_path) == []

    output = tmp_path / quickstart.OUTPUT
    output.write_text(output.read_text().replace("--leader-elect", "--leader-elect=false"))
    assert quickstart.drift(helm, tmp_path) == [str(quickstart.OUTPUT)]
    quickstart.write(helm, tmp_path)
    assert quickstart.drift(helm, tmp_path) == []

    values = tmp_path / quickstart.VALUES
    values.write_text(values.read_text().replace("terminationGracePeriodSeconds: 600",
                                                 "terminationGracePeriodSeconds: 60"))
    assert quickstart.drift(helm, tmp_path) == [str(quickstart.OUTPUT)]
    quickstart.write(helm, tmp_path)

    crd = tmp_path / quickstart.CHART_CRDS / "pulumi.com_stacks.yaml"
    crd.write_text(crd.read_text() + "# stale\n")
    assert str(quickstart.CHART_CRDS / "pulumi.com_stacks.yaml") in quickstart.drift(helm, tmp_path)


def test_reference_objects(objects: list[dict[str, Any]]) -> None:
    found = by_key(objects)
    assert objects[0] == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": {
        "app.kubernetes.io/name": "pulumi-kubernetes-operator", "control-plane": "controller-manager"}}}
    names = set(found)
    crd_names = {("CustomResourceDefinition", "", m["metadata"]["name"]) for m in crds.all_crds().values()}
    assert names == {
        ("Namespace", "", NS),
        *crd_names,
        ("ServiceAccount", NS, "controller-manager"),
        ("ServiceAccount", "default", "pulumi"),
        ("Role", NS, "leader-election-role"),
        ("Role", NS, "token-request-role"),
        ("RoleBinding", NS, "leader-election-rolebinding"),
        ("RoleBinding", NS, "token-request-rolebinding"),
        ("ClusterRole", "", "pulumi-kubernetes-operator-controller-manager"),
        ("ClusterRole", "", "metrics-auth-role"),
        ("ClusterRole", "", "metrics-reader"),
        ("ClusterRole", "", "pulumi-kubernetes-operator-edit"),
        ("ClusterRole", "", "pulumi-kubernetes-operator-view"),
        ("ClusterRole", "", "pulumi-kubernetes-operator-stack-approver"),  # pko approvals (docs/approvals.md)
        ("ClusterRoleBinding", "", "pulumi-kubernetes-operator-controller-manager"),
        ("ClusterRoleBinding", "", "metrics-auth-rolebinding"),
        ("ClusterRoleBinding", "", "default:pulumi:system:auth-delegator"),
        ("Service", NS, "pulumi-kubernetes-operator"),
        ("Deployment", NS, "controller-manager"),
        ("NetworkPolicy", "default", "allow-workspace-rpc"),
    }
    delegator = found["ClusterRoleBinding", "", "default:pulumi:system:auth-delegator"]
    assert delegator["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                    "name": "system:auth-delegator"}
    assert delegator["subjects"] == [{"kind": "ServiceAccount", "name": "pulumi", "namespace": "default"}]
    token = found["Role", NS, "token-request-role"]
    assert token["rules"] == [{"apiGroups": [""], "resources": ["serviceaccounts/token"],
                               "resourceNames": ["controller-manager"], "verbs": ["create"]}]
    for binding in (found["ClusterRoleBinding", "", "metrics-auth-rolebinding"],
                    found["ClusterRoleBinding", "", "pulumi-kubernetes-operator-controller-manager"],
                    found["RoleBinding", NS, "leader-election-rolebinding"]):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "controller-manager", "namespace": NS}]


def test_deployment_and_service(objects: list[dict[str, Any]]) -> None:
    found = by_key(objects)
    deployment = found["Deployment", NS, "controller-manager"]
    template = deployment["spec"]["template"]
    assert deployment["spec"]["selector"] == {"matchLabels": {"control-plane": "controller-manager"}}
    assert template["metadata"]["labels"]["control-plane"] == "controller-manager"
    assert template["spec"]["serviceAccountName"] == "controller-manager"
    assert template["spec"]["terminationGracePeriodSeconds"] == 600
    (container,) = template["spec"]["containers"]
    assert container["args"][:2] == ["pko", "operator"]
    assert "--leader-elect" in container["args"]
    assert f"--program-fs-adv-addr={NS}.$(POD_NAMESPACE):80" in container["args"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["AGENT_IMAGE"] == container["image"]
    service = found["Service", NS, "pulumi-kubernetes-operator"]
    assert service["spec"]["selector"] == {"control-plane": "controller-manager"}
    assert {p["port"]: p["targetPort"] for p in service["spec"]["ports"]} == {80: "http-fileserver",
                                                                             8383: "http-metrics"}
    policy = found["NetworkPolicy", "default", "allow-workspace-rpc"]
    (peer,) = policy["spec"]["ingress"][0]["from"]
    assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": NS}}
    assert peer["podSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
