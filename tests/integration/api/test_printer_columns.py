"""The built kubectl shows the Go operator's printer columns for our kinds (and ``kubectl get pulumi`` lists
them all through the ``pulumi`` category)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from crd_testlib import apply_status, create, kubectl, load_manifests
from lightkube import Client

from pko.testing import controlplane

EXAMPLES = {
    "Stack": "stack-git-branch.yaml",
    "Workspace": "workspace-git.yaml",
    "Update": "update-up.yaml",
    "Program": "program-random-yaml.yaml",
}
NOW = "2026-01-01T00:00:00Z"
STATUS: dict[str, dict[str, Any]] = {
    "Stack": {
        "lastUpdate": {"state": "succeeded", "lastResyncTime": NOW, "lastAttemptedCommit": "abc123",
                       "permalink": "https://app.pulumi.com/acme/nginx/prod/updates/7"},
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "NotReadyInProgress",
             "message": "reconciliation is in progress", "lastTransitionTime": NOW},
            {"type": "Reconciling", "status": "True", "reason": "StackProcessing",
             "message": "stack is being processed", "lastTransitionTime": NOW},
            # Not a state the operator writes together with Reconciling: here only to show the STALLED column.
            {"type": "Stalled", "status": "True", "reason": "SourceUnavailable",
             "message": "the source is unavailable", "lastTransitionTime": NOW},
        ],
    },
    "Workspace": {
        "address": "random-yaml-1e2fc47-workspace.ns:50051",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded", "message": "",
                        "lastTransitionTime": NOW}],
    },
    "Update": {
        "startTime": NOW, "endTime": NOW, "permalink": "https://app.pulumi.com/acme/x/dev/updates/3",
        "conditions": [
            {"type": "Progressing", "status": "False", "reason": "Complete", "message": "",
             "lastTransitionTime": NOW},
            {"type": "Failed", "status": "False", "reason": "UpdateSucceeded", "message": "",
             "lastTransitionTime": NOW},
            {"type": "Complete", "status": "True", "reason": "Updated", "message": "",
             "lastTransitionTime": NOW},
        ],
    },
    "Program": {},
}


@pytest.fixture(scope="module")
def objects(client: Client, namespace: str) -> dict[str, dict[str, Any]]:
    """One object of each kind, with a status, in the module's namespace."""
    manifests = {m["kind"]: m for name, m in load_manifests() if name in EXAMPLES.values()}
    for kind, manifest in manifests.items():
        create(client, manifest, namespace)
        if STATUS[kind]:
            apply_status(client, manifest, STATUS[kind], namespace)
    return manifests


def _table(cp: controlplane.ControlPlane, cache: Path, namespace: str, *args: str) -> list[list[str]]:
    """kubectl's table, cut at the header's column starts (empty cells stay empty)."""
    result = kubectl(cp, "get", *args, "-n", namespace, cache_dir=cache)
    assert result.returncode == 0, result.stderr
    header, *lines = [line for line in result.stdout.splitlines() if line.strip()]
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", header)]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    return [[line[a:b].strip() for a, b in bounds] for line in (header, *lines)]


@pytest.mark.parametrize(("resource", "wide", "header"), [
    ("stacks", False, ["NAME", "LAST UPDATE", "AGE", "READY", "RECONCILING", "STALLED", "PERMALINK"]),
    ("stacks", True, ["NAME", "STACK", "LAST UPDATE", "AGE", "LAST COMMIT", "READY", "RECONCILING", "STALLED",
                      "PERMALINK"]),
    ("workspaces", False, ["NAME", "IMAGE", "READY", "ADDRESS"]),
    ("updates", False, ["NAME", "WORKSPACE", "PROGRESSING", "FAILED", "COMPLETE", "URL"]),
    ("updates", True, ["NAME", "WORKSPACE", "TYPE", "START TIME", "END TIME", "PROGRESSING", "FAILED",
                       "COMPLETE", "URL"]),
    ("programs", False, ["NAME", "AGE", "URL"]),
])
def test_kubectl_header(control_plane: controlplane.ControlPlane, tmp_path: Path, namespace: str,
                        objects: dict[str, Any], resource: str, wide: bool, header: list[str]) -> None:
    rows = _table(control_plane, tmp_path, namespace, resource, *(["-o", "wide"] if wide else []))
    assert rows[0] == header
    assert len(rows) == 2


def test_kubectl_values(control_plane: controlplane.ControlPlane, tmp_path: Path, namespace: str,
                        objects: dict[str, Any]) -> None:
    stacks = _table(control_plane, tmp_path, namespace, "stacks", "-o", "wide")
    row = dict(zip(stacks[0], stacks[1], strict=True))
    assert row["NAME"] == "nginx-branch"
    assert row["STACK"] == "acme/nginx/prod"
    assert row["LAST UPDATE"] == "succeeded"
    assert row["LAST COMMIT"] == "abc123"
    assert row["READY"] == "False"
    assert row["RECONCILING"] == "StackProcessing"
    assert row["STALLED"] == "SourceUnavailable"  # the condition's reason, as in the Go operator's CRD
    assert row["PERMALINK"] == "https://app.pulumi.com/acme/nginx/prod/updates/7"

    workspaces = _table(control_plane, tmp_path, namespace, "workspaces")
    assert workspaces[1] == ["random-yaml-1e2fc47", "pulumi/pulumi:3.147.0-nonroot", "True",
                             "random-yaml-1e2fc47-workspace.ns:50051"]
    updates = _table(control_plane, tmp_path, namespace, "updates", "-o", "wide")
    row = dict(zip(updates[0], updates[1], strict=True))
    assert (row["TYPE"], row["PROGRESSING"], row["FAILED"], row["COMPLETE"]) == ("up", "False", "False", "True")
    assert row["URL"] == "https://app.pulumi.com/acme/x/dev/updates/3"


def test_pulumi_category_lists_every_kind(control_plane: controlplane.ControlPlane, tmp_path: Path,
                                          namespace: str, objects: dict[str, Any]) -> None:
    result = kubectl(control_plane, "get", "pulumi", "-n", namespace, "-o", "name", cache_dir=tmp_path)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == sorted([
        "program.pulumi.com/random-yaml",
        "stack.pulumi.com/nginx-branch",
        "update.auto.pulumi.com/random-yaml-up-18f3a2b4c5d",
        "workspace.auto.pulumi.com/random-yaml-1e2fc47",
    ])
