"""The kind a Stack's Flux `sourceRef` names: the served plural, whatever version of the group it asks for."""

from __future__ import annotations

import pytest

from pko.api import stack as stack_api
from pko.controllers.stack import setup, source
from pko.kube import resources


def ref(api_version: str, kind: str) -> stack_api.FluxSourceReference:
    return stack_api.FluxSourceReference(apiVersion=api_version, kind=kind, name="n")


@pytest.mark.parametrize(("api_version", "kind", "plural"), [
    ("source.toolkit.fluxcd.io/v1", "GitRepository", "gitrepositories"),
    # Flux 2.6+ serves these as v1 only; the v1beta2 registration must not leak a wrong plural or version.
    ("source.toolkit.fluxcd.io/v1", "OCIRepository", "ocirepositories"),
    ("source.toolkit.fluxcd.io/v1", "Bucket", "buckets"),
    ("source.toolkit.fluxcd.io/v1", "ExternalArtifact", "externalartifacts"),
    ("source.toolkit.fluxcd.io/v1", "HelmChart", "helmcharts"),
    ("example.com/v1alpha1", "Policy", "policies"),
    ("example.com/v1alpha1", "Gateway", "gateways"),
    ("example.com/v1alpha1", "Box", "boxes"),
    ("example.com/v1alpha1", "Mesh", "meshes"),
])
def test_flux_kind_resolves_the_served_plural(api_version: str, kind: str, plural: str) -> None:
    found = source.flux_kind(ref(api_version, kind))
    assert found == resources.Kind(api_version, kind, plural)


@pytest.mark.parametrize("api_version", ["", "v1", "source.toolkit.fluxcd.io"])
def test_flux_kind_rejects_an_api_version_without_group(api_version: str) -> None:
    with pytest.raises(ValueError, match="invalid sourceRef apiVersion/kind"):
        source.flux_kind(ref(api_version, "GitRepository"))


def test_flux_index_key_ignores_the_version() -> None:
    stack = {"spec": {"fluxSource": {"sourceRef": {"apiVersion": "source.toolkit.fluxcd.io/v1beta2",
                                                   "kind": "GitRepository", "name": "app"}}}}
    kind = source.flux_kind(ref("source.toolkit.fluxcd.io/v1", "GitRepository"))
    assert setup._flux(stack) == [setup.flux_key(kind.api_version, kind.kind, "app")]
    assert setup._flux({"spec": {"programRef": {"name": "p"}}}) == []


@pytest.mark.parametrize(("api_version", "kind", "name"), [
    ("source.toolkit.fluxcd.io/v1", "Git\x1fRepository", "app"),
    ("source.toolkit.fluxcd.io/v1", "GitRepository/../../secrets", "app"),
    ("source.toolkit.fluxcd.io\x05/v1", "GitRepository", "app"),
    ("source.toolkit.fluxcd.io/v1", "GitRepository", "a\x10b"),
    ("source.toolkit.fluxcd.io/v1", "GitRepository", "../secrets"),
])
def test_flux_kind_rejects_what_would_not_fit_a_request_url(api_version: str, kind: str, name: str) -> None:
    """Found by the fuzzed-spec test: these made every reconcile of the Stack fail on building the URL."""
    with pytest.raises(ValueError, match="not a Kubernetes group/version, kind and object name"):
        source.flux_kind(stack_api.FluxSourceReference.model_validate(
            {"apiVersion": api_version, "kind": kind, "name": name}))
