"""The committed CRDs (the Go operator's four and pko's StackApproval) install on a real API server, become
Established and serve the expected versions."""

from __future__ import annotations

from pathlib import Path

from crd_testlib import CRD_DIR, kubectl
from lightkube import Client
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

from pko.api import crds
from pko.testing import controlplane

EXPECTED = {
    "stacks.pulumi.com": ({"v1": True, "v1alpha1": False}, "Stack"),
    "programs.pulumi.com": ({"v1": True}, "Program"),
    "workspaces.auto.pulumi.com": ({"v1alpha1": True}, "Workspace"),
    "updates.auto.pulumi.com": ({"v1alpha1": True}, "Update"),
    "stackapprovals.pulumi.com": ({"v1alpha1": True}, "StackApproval"),  # pko (docs/approvals.md)
    "stackrollouts.pulumi.com": ({"v1alpha1": True}, "StackRollout"),  # pko (docs/rollouts.md)
}


def test_all_four_crds_are_established(client: Client, installed_crds: dict[str, crds.Manifest]) -> None:
    assert {m["metadata"]["name"] for m in installed_crds.values()} == set(EXPECTED)
    for name, (versions, kind) in EXPECTED.items():
        crd = client.get(CustomResourceDefinition, name)
        assert crd.status is not None
        assert crd.status.conditions is not None
        assert crd.status.acceptedNames is not None
        conditions = {c.type: c.status for c in crd.status.conditions}
        assert conditions.get("Established") == "True", (name, conditions)
        assert conditions.get("NamesAccepted") == "True", (name, conditions)
        assert crd.spec.scope == "Namespaced"
        assert crd.spec.names.kind == kind
        assert crd.spec.names.categories == ["pulumi"]
        assert not crd.spec.names.shortNames
        assert {v.name: v.storage for v in crd.spec.versions} == versions
        assert all(v.served and v.subresources is not None and v.subresources.status is not None
                   for v in crd.spec.versions)
        assert crd.status.acceptedNames.kind == kind


def test_classic_client_side_apply_fits_the_annotation_limit(
        control_plane: controlplane.ControlPlane, installed_crds: dict[str, crds.Manifest], tmp_path: Path) -> None:
    """``kubectl apply -f deploy/crds/`` (client-side, which stores the whole CRD in an annotation limited to
    256 KiB) works, not only server-side apply."""
    result = kubectl(control_plane, "apply", "--dry-run=server", "-f", str(CRD_DIR), cache_dir=tmp_path)
    assert result.returncode == 0, result.stderr
