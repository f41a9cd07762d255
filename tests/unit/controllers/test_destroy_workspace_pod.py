"""PKO#1300 (fixed in the Go operator's 2.9.1): a Stack deleted with `destroyOnFinalize` and `runProgram` off, whose
`workspaceTemplate` names a `local` source, got a workspace pod with two `fetch` init containers (one for the
project-info source, one for the template's), which the API server refuses, so the destroy never ran. In pko the
Workspace that Stack implies becomes a pod with exactly one init container of each name, the template's source
winning (its program is in the image)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from pko.api import stack as stack_api
from pko.api import workspace as ws_api
from pko.controllers.stack import workspace as ws_build
from pko.controllers.workspace import manifests

AGENT = manifests.AgentImage("example.com/pko:1.2.3", "IfNotPresent")
PROJECT_INFO = {"name": "app", "runtime": "nodejs"}


def _deleting_stack(template: dict[str, Any]) -> stack_api.Stack:
    return stack_api.Stack.model_validate({
        "apiVersion": "pulumi.com/v1", "kind": "Stack",
        "metadata": {"name": "app", "namespace": "ns", "uid": "u", "generation": 2,
                     "deletionTimestamp": "2026-09-01T00:00:00Z", "finalizers": ["finalizer.stack.pulumi.com"]},
        "spec": {"stack": "dev", "destroyOnFinalize": True, "runProgram": False, "workspaceTemplate": template},
        "status": {"projectInfo": PROJECT_INFO},
    })


@pytest.mark.parametrize("template", [
    {"spec": {"local": {"dir": "/app"}}},
    {"spec": {"local": {"dir": "/app"}, "podTemplate": {"spec": {"initContainers": [
        {"name": "fetch", "env": [{"name": "EXTRA", "value": "1"}]}]}}}},
], ids=["local", "local-and-a-fetch-override"])
def test_the_destroy_pod_has_one_fetch_init_container(template: dict[str, Any]) -> None:
    desired = ws_build.desired(_deleting_stack(template), ws_build.Source(project_info=PROJECT_INFO))
    workspace = ws_api.Workspace.model_validate(desired)
    pod = manifests.statefulset(workspace, AGENT)["spec"]["template"]["spec"]
    names = Counter(c["name"] for c in pod["initContainers"])
    assert names == Counter({"bootstrap": 1, "fetch": 1}), pod["initContainers"]
    fetch = next(c for c in pod["initContainers"] if c["name"] == "fetch")
    env = {e["name"]: e.get("value") for e in fetch.get("env") or []}
    assert env.get("LOCAL_DIR") == "/app", env  # the template's source: the program is in the image
