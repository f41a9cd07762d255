"""Every example manifest (Go operator docs and examples, each source and auth variant) is accepted by the API
server and reads back with no field pruned; our models read the stored object and write it back unchanged."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crd_testlib import apply_status, assert_not_pruned, create, get, load_manifests
from lightkube import Client

from pko.api import program, stack, update, workspace
from pko.api.meta import Wire

MODELS: dict[str, type[Wire]] = {
    "Stack": stack.Stack,
    "Program": program.Program,
    "Workspace": workspace.Workspace,
    "Update": update.Update,
}
MANIFESTS = load_manifests()


def test_every_kind_has_examples() -> None:
    kinds = {manifest["kind"] for _, manifest in MANIFESTS}
    assert kinds == set(MODELS)


@pytest.mark.parametrize(("file_name", "manifest"), MANIFESTS, ids=[name for name, _ in MANIFESTS])
def test_example_is_stored_without_pruning(client: Client, namespace: str, file_name: str,
                                           manifest: dict[str, Any]) -> None:
    created = create(client, manifest, namespace)
    stored = get(client, manifest, namespace)
    assert created == stored
    assert_not_pruned({k: v for k, v in manifest.items() if k != "metadata"}, stored)
    assert_not_pruned(manifest["metadata"], stored["metadata"])

    model = MODELS[manifest["kind"]].model_validate(stored)
    assert model.to_wire() == stored


def test_v1alpha1_and_v1_read_the_same_stack(client: Client, namespace: str) -> None:
    """v1alpha1 is served with the v1 schema and no conversion: both versions show the same fields."""
    manifest = next(m for name, m in MANIFESTS if name == "stack-workspace-template.yaml")
    manifest = {**copy.deepcopy(manifest), "metadata": {"name": "both-versions"}}
    create(client, manifest, namespace)
    v1 = get(client, manifest, namespace)
    alpha = get(client, {**manifest, "apiVersion": "pulumi.com/v1alpha1"}, namespace)
    assert alpha["apiVersion"] == "pulumi.com/v1alpha1"
    assert alpha["spec"] == v1["spec"]


def test_workspace_defaults_are_applied(client: Client, namespace: str) -> None:
    """The Workspace CRD defaults serviceAccountName and securityProfile like the Go operator's, and the model's
    Python defaults are the same values."""
    manifest = next(m for name, m in MANIFESTS if name == "workspace-local.yaml")
    manifest = {**copy.deepcopy(manifest), "metadata": {"name": "defaulted"}}
    stored = create(client, manifest, namespace)
    assert stored["spec"]["serviceAccountName"] == "default"
    assert stored["spec"]["securityProfile"] == "restricted"
    assert workspace.Workspace.model_validate(stored).spec == workspace.WorkspaceSpec.model_validate(manifest["spec"])


def test_non_api_fields_are_pruned_as_by_the_go_operator(client: Client, namespace: str) -> None:
    """The Go operator's custom-workspace example sets ``git.revision``, which is not an API field: it is pruned
    there and here alike (``git.ref`` is the field)."""
    manifest: dict[str, Any] = {
        "apiVersion": workspace.API_VERSION, "kind": "Workspace", "metadata": {"name": "with-revision"},
        "spec": {"git": {"url": "https://github.com/pulumi/examples.git", "revision": "1e2fc47", "dir": "x"}},
    }
    stored = create(client, manifest, namespace)
    assert stored["spec"]["git"] == {"url": "https://github.com/pulumi/examples.git", "dir": "x"}


def test_status_round_trips_through_the_status_subresource(client: Client, namespace: str) -> None:
    """A full Stack status written by the operator (conditions, outputs, last/current update, project info)
    is stored as is."""
    manifest = next(m for name, m in MANIFESTS if name == "stack-git-branch.yaml")
    manifest = {**copy.deepcopy(manifest), "metadata": {"name": "with-status"}}
    create(client, manifest, namespace)
    status = stack.StackStatus(
        observed_generation=1,
        observed_reconcile_request="2026-01-01T00:00:00Z",
        conditions=[
            {"type": "Ready", "status": "True", "reason": "ProcessingCompleted",
             "message": "the stack has been processed and is up to date",
             "lastTransitionTime": "2026-01-01T00:00:00Z"},
        ],
        outputs={"url": "https://example.com", "count": 3, "nested": {"list": [1, "two", None]},
                 "secret": "[secret]"},
        last_update={"generation": 1, "name": "with-status-18f3a2b4c5d", "type": "up", "state": "succeeded",
                     "message": "update succeeded", "lastAttemptedCommit": "abc", "lastSuccessfulCommit": "abc",
                     "permalink": "https://app.pulumi.com/acme/nginx/prod/updates/1",
                     "lastResyncTime": "2026-01-01T00:00:00Z", "failures": 0},
        current_update={"generation": 2, "reconcileRequest": "r", "name": "with-status-18f3a2b4c5e",
                        "commit": "def"},
        project_info={"name": "nginx", "runtime": "nodejs"},
    )
    apply_status(client, manifest, status.to_wire(), namespace)
    stored = get(client, manifest, namespace)
    assert stored["status"] == status.to_wire()
    assert stack.Stack.model_validate(stored).status == status
