"""The four committed CRDs install on a real API server, become Established and serve the expected versions."""

from __future__ import annotations

from lightkube import Client
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

from pko.api import crds

EXPECTED = {
    "stacks.pulumi.com": ({"v1": True, "v1alpha1": False}, "Stack"),
    "programs.pulumi.com": ({"v1": True}, "Program"),
    "workspaces.auto.pulumi.com": ({"v1alpha1": True}, "Workspace"),
    "updates.auto.pulumi.com": ({"v1alpha1": True}, "Update"),
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
