"""Helpers shared by the API integration tests: our kinds as lightkube generic resources, the example manifests,
kubectl with the test kubeconfig, and the "nothing was pruned" comparison."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import yaml
from lightkube import Client
from lightkube.generic_resource import GenericNamespacedResource, create_namespaced_resource

from pko.testing import binaries, controlplane

REPO = Path(__file__).resolve().parents[3]
CRD_DIR = REPO / "deploy" / "crds"
MANIFEST_DIR = Path(__file__).resolve().parent / "manifests"

RESOURCES: dict[tuple[str, str], type[GenericNamespacedResource]] = {
    ("pulumi.com/v1", "Stack"): create_namespaced_resource("pulumi.com", "v1", "Stack", "stacks"),
    ("pulumi.com/v1alpha1", "Stack"): create_namespaced_resource("pulumi.com", "v1alpha1", "Stack", "stacks"),
    ("pulumi.com/v1", "Program"): create_namespaced_resource("pulumi.com", "v1", "Program", "programs"),
    ("auto.pulumi.com/v1alpha1", "Workspace"):
        create_namespaced_resource("auto.pulumi.com", "v1alpha1", "Workspace", "workspaces"),
    ("auto.pulumi.com/v1alpha1", "Update"):
        create_namespaced_resource("auto.pulumi.com", "v1alpha1", "Update", "updates"),
    ("pulumi.com/v1alpha1", "StackRollout"):
        create_namespaced_resource("pulumi.com", "v1alpha1", "StackRollout", "stackrollouts"),
}


def resource_for(manifest: dict[str, Any]) -> type[GenericNamespacedResource]:
    return RESOURCES[(manifest["apiVersion"], manifest["kind"])]


def load_manifests() -> list[tuple[str, dict[str, Any]]]:
    """(file name, object) for every example manifest."""
    found = []
    for path in sorted(MANIFEST_DIR.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                found.append((path.name, document))
    return found


def kubectl(cp: controlplane.ControlPlane, *args: str, stdin: str | None = None,
            cache_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [str(binaries.require("kubectl")), f"--kubeconfig={cp.kubeconfig}"]
    if cache_dir is not None:
        argv.append(f"--cache-dir={cache_dir}")
    return subprocess.run([*argv, *args], input=stdin, capture_output=True, text=True, timeout=120, check=False)




def assert_not_pruned(sent: Any, stored: Any, path: str = "") -> None:
    """Every field of `sent` is in `stored` with the same value (the server may add defaults, never drop)."""
    if isinstance(sent, dict):
        assert isinstance(stored, dict), f"{path or '.'}: expected an object, got {stored!r}"
        for key, value in sent.items():
            assert key in stored, f"{path}.{key} was pruned"
            assert_not_pruned(value, stored[key], f"{path}.{key}")
    elif isinstance(sent, list):
        assert isinstance(stored, list), f"{path}: expected a list, got {stored!r}"
        assert len(stored) == len(sent), f"{path}: {sent!r} stored as {stored!r}"
        for index, (a, b) in enumerate(zip(sent, stored, strict=True)):
            assert_not_pruned(a, b, f"{path}[{index}]")
    else:
        assert sent == stored, f"{path}: {sent!r} stored as {stored!r}"
        assert type(sent) is type(stored), f"{path}: {sent!r} stored as {stored!r}"


def create(client: Client, manifest: dict[str, Any], namespace: str) -> dict[str, Any]:
    """Create one of our objects from raw JSON; the stored object comes back as plain JSON."""
    resource = resource_for(manifest)
    stored: dict[str, Any] = _plain(client.create(resource.from_dict(copy.deepcopy(manifest)), namespace=namespace))
    return stored


def get(client: Client, manifest: dict[str, Any], namespace: str) -> dict[str, Any]:
    """Read the object `manifest` names (through `manifest`'s apiVersion)."""
    stored: dict[str, Any] = _plain(client.get(resource_for(manifest), manifest["metadata"]["name"],
                                               namespace=namespace))
    return stored


def apply_status(client: Client, manifest: dict[str, Any], status: dict[str, Any], namespace: str) -> None:
    """Server-side apply `status` through the status subresource."""
    body = {"apiVersion": manifest["apiVersion"], "kind": manifest["kind"],
            "metadata": {"name": manifest["metadata"]["name"]}, "status": status}
    status_object: Any = resource_for(manifest).Status.from_dict(body)
    client.apply(status_object, manifest["metadata"]["name"], namespace=namespace, field_manager="pko-api-tests",
                 force=True)


def _plain(value: Any) -> Any:
    """lightkube hands generic objects back as dict subclasses; normalise to plain JSON values."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
