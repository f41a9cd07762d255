"""The chart's life cycle on a real cluster, last in this tier: `helm upgrade` to a chart whose CRDs gained a field
updates the CRDs (the upgrade path PKO#596 broke), `helm uninstall` leaves no operator object behind (the CRDs stay,
and with them every Stack), and the quickstart manifest applied as is brings the operator up."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from pko.testing import cluster
from pko.testing.clusterbed import CHART, OPERATOR_NAMESPACE, OPERATOR_TAG, RELEASE, ROOT, Release, diagnose, helm

NEW_FIELD = "pkoUpgradeProbe"
#: Namespaced and cluster-wide kinds the chart creates for the operator (CRDs are kept on purpose).
OPERATOR_KINDS = ("deployments", "services", "serviceaccounts", "roles", "rolebindings", "clusterroles",
                  "clusterrolebindings", "networkpolicies")


def _stack_crd_properties(real_cluster: cluster.Cluster) -> dict:  # type: ignore[type-arg]
    crd = real_cluster.api_get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/stacks.pulumi.com") or {}
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]  # type: ignore[no-any-return]


def _release_objects(real_cluster: cluster.Cluster) -> list[str]:
    found = []
    for kind in OPERATOR_KINDS:
        listed = real_cluster.kubectl("get", kind, "-A", "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "name",
                                      check=False)
        found += listed.stdout.split()
    return found


def test_upgrade_updates_crds_then_uninstall_leaves_nothing(real_cluster: cluster.Cluster, operator_release: Release,
                                                            tmp_path: Path) -> None:
    assert NEW_FIELD not in _stack_crd_properties(real_cluster)
    chart = tmp_path / "pko"
    shutil.copytree(CHART, chart)
    crd_file = chart / "files" / "crds" / "pulumi.com_stacks.yaml"
    crd = yaml.safe_load(crd_file.read_text())
    for version in crd["spec"]["versions"]:
        version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][NEW_FIELD] = {
            "type": "string", "description": "a field only the upgraded chart has"}
    crd_file.write_text(yaml.safe_dump(crd))
    helm(real_cluster, "upgrade", RELEASE, str(chart), "--namespace", OPERATOR_NAMESPACE, "--reuse-values",
         "--wait", "--timeout", "240s")
    assert NEW_FIELD in _stack_crd_properties(real_cluster)

    assert _release_objects(real_cluster), "the release's objects are listed by its instance label"
    helm(real_cluster, "uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, "--wait", "--timeout", "180s")
    operator_release.installed = False
    assert _release_objects(real_cluster) == []
    pods = (real_cluster.api_get(f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods") or {}).get("items", [])
    assert [p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp") is None] == []
    # the CRDs (and every Stack) survive an uninstall
    assert real_cluster.api_get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/stacks.pulumi.com")


def test_quickstart_manifest_as_is(real_cluster: cluster.Cluster, operator_release: Release) -> None:
    assert not operator_release.installed, "runs after the chart's release is gone (two operators would race)"
    manifest = ROOT / "deploy" / "quickstart" / "install.yaml"
    image = next(line.split('"')[1] for line in manifest.read_text().splitlines()
                 if line.strip().startswith("image: \"docker.io/pko/pko:"))
    real_cluster.tag_image(f"docker.io/pko/pko:{OPERATOR_TAG}", image)  # the release tag the quickstart names
    real_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(manifest))
    try:
        done = real_cluster.kubectl("rollout", "status", "-n", "pulumi-kubernetes-operator",
                                    "deployment/controller-manager", "--timeout=240s", check=False, timeout=260)
        assert done.returncode == 0, f"{done.stderr}\n{diagnose(real_cluster, 'pulumi-kubernetes-operator')}"
    finally:
        real_cluster.kubectl("delete", "-f", str(manifest), "--wait=false", "--ignore-not-found", check=False)
