"""The generated CRDs carry the Go operator v2.9 contract (pko-v2.md §2): names, versions, columns, validation,
defaults, list semantics, free-form JSON and the apply-configuration templates."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pko.api import crds

ALL = crds.all_crds()


def _root(manifest: crds.Manifest, version: int = 0) -> dict[str, Any]:
    root: dict[str, Any] = manifest["spec"]["versions"][version]["schema"]["openAPIV3Schema"]
    return root


def _at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in path.split("."):
        node = node["items"] if part == "[]" else node["additionalProperties"] if part == "{}" else \
            node["properties"][part]
    return node


def _nodes(node: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found.extend(_nodes(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_nodes(value))
    return found


def _columns(manifest: crds.Manifest, version: int = 0) -> list[tuple[str, str, str, int]]:
    return [(c["name"], c["jsonPath"], c["type"], c.get("priority", 0))
            for c in manifest["spec"]["versions"][version].get("additionalPrinterColumns", [])]


@pytest.mark.parametrize(("manifest", "group", "kind", "plural"), [
    (crds.stacks(), "pulumi.com", "Stack", "stacks"),
    (crds.programs(), "pulumi.com", "Program", "programs"),
    (crds.workspaces(), "auto.pulumi.com", "Workspace", "workspaces"),
    (crds.updates(), "auto.pulumi.com", "Update", "updates"),
])
def test_names(manifest: crds.Manifest, group: str, kind: str, plural: str) -> None:
    assert manifest["metadata"]["name"] == f"{plural}.{group}"
    spec = manifest["spec"]
    assert spec["group"] == group
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {"categories": ["pulumi"], "kind": kind, "listKind": f"{kind}List", "plural": plural,
                             "singular": kind.lower()}
    assert "conversion" not in spec
    for version in spec["versions"]:
        assert version["served"] is True
        assert version["subresources"] == {"status": {}}


def test_structural_everywhere() -> None:
    text = json.dumps(ALL)
    assert "$ref" not in text
    assert '"allOf"' not in text
    assert "x-pko" not in text


def test_stack_v1alpha1_has_the_older_schema() -> None:
    """Same spec as v1; the status has outputs and lastUpdate only; no name rule, no printer columns."""
    stacks = crds.stacks()
    v1, alpha = stacks["spec"]["versions"]
    assert (v1["name"], v1["storage"], alpha["name"], alpha["storage"]) == ("v1", True, "v1alpha1", False)
    assert _at(_root(stacks, 1), "spec") == _at(_root(stacks), "spec")
    assert sorted(_at(_root(stacks, 1), "status")["properties"]) == ["lastUpdate", "outputs"]
    assert "x-kubernetes-validations" not in _root(stacks, 1)
    assert "additionalPrinterColumns" not in alpha


def test_stack_columns_rule_and_required() -> None:
    stacks = crds.stacks()
    assert _columns(stacks) == [
        ("Stack", ".spec.stack", "string", 10),
        ("Last Update", ".status.lastUpdate.state", "string", 0),
        ("Age", ".status.lastUpdate.lastResyncTime", "date", 0),
        ("Last Commit", ".status.lastUpdate.lastAttemptedCommit", "string", 10),
        ("Ready", '.status.conditions[?(@.type=="Ready")].status', "string", 0),
        ("Reconciling", '.status.conditions[?(@.type=="Reconciling")].reason', "string", 0),
        ("Stalled", '.status.conditions[?(@.type=="Stalled")].reason', "string", 0),
        ("Permalink", ".status.lastUpdate.permalink", "string", 0),
    ]
    root = _root(stacks)
    assert root["x-kubernetes-validations"] == [{
        "message": "Stack name must be no more than 42 characters in length.",
        "rule": "size(self.metadata.name) <= 42",
    }]
    assert _at(root, "spec")["required"] == ["stack"]


def test_stack_spec_fields() -> None:
    spec = _at(_root(crds.stacks()), "spec")["properties"]
    assert sorted(spec) == sorted([
        "stack", "backend", "accessTokenSecret", "envs", "envSecrets", "envRefs", "config", "configRef", "secrets",
        "secretsRef", "secretsProvider", "projectRepo", "gitAuthSecret", "gitAuth", "repoDir", "commit", "branch",
        "shallow", "fluxSource", "programRef", "targets", "targetDependents", "prerequisites",
        "continueResyncOnCommitMatch", "refresh", "preview", "expectNoRefreshChanges", "destroyOnFinalize",
        "runProgram", "retryOnUpdateConflict", "useLocalStackOnly", "resyncFrequencySeconds",
        "retryMaxBackoffDurationSeconds", "serviceAccountName", "workspaceTemplate", "updateTemplate",
        "workspaceReclaimPolicy", "environment",
        # pko additions (docs/suspend-and-retries.md, docs/outputs.md, docs/approvals.md, docs/destroy-protection.md,
        # docs/scale-to-zero.md, docs/drift-detection.md, docs/ttl.md, docs/stack-dependencies.md), optional and
        # without defaults
        "suspend", "retryPolicy", "outputs", "approval", "destroyProtection", "workspaceIdleTimeout", "driftDetection",
        "ttl", "outputRefs",
    ])
    assert {k: v for k, v in spec["config"].items() if k != "description"} == {
        "x-kubernetes-preserve-unknown-fields": True}
    assert spec["workspaceReclaimPolicy"] == {"enum": ["Retain", "Delete"], "type": "string"}
    assert spec["environment"]["x-kubernetes-list-type"] == "atomic"
    assert spec["resyncFrequencySeconds"] == {"format": "int64", "type": "integer"}
    ref = spec["envRefs"]["additionalProperties"]
    assert ref["required"] == ["type"]
    assert "enum" not in ref["properties"]["type"]
    assert ref["properties"]["secret"]["required"] == ["key", "name"]
    auth = spec["gitAuth"]["properties"]
    assert sorted(auth) == ["accessToken", "basicAuth", "githubApp", "sshAuth"]
    assert auth["sshAuth"]["required"] == ["sshPrivateKey"]
    assert auth["basicAuth"]["required"] == ["password", "userName"]
    assert auth["githubApp"]["required"] == ["appID", "installationID", "privateKey"]
    assert spec["fluxSource"]["required"] == ["sourceRef"]
    assert spec["fluxSource"]["properties"]["sourceRef"]["required"] == ["apiVersion", "kind", "name"]
    assert spec["programRef"]["required"] == ["name"]
    assert spec["configRef"]["additionalProperties"]["required"] == ["key", "name"]
    assert spec["prerequisites"]["items"]["required"] == ["name"]


def test_stack_status_fields() -> None:
    status = _at(_root(crds.stacks()), "status")["properties"]
    assert sorted(status) == sorted(["observedGeneration", "observedReconcileRequest", "conditions", "outputs",
                                     "lastUpdate", "currentUpdate", "projectInfo", "approval",  # approval: pko
                                     "drift",  # pko: drift checks (docs/drift-detection.md)
                                     "nextRetryTime"])  # pko: the failure policy's next retry
    assert status["outputs"] == {"additionalProperties": {"x-kubernetes-preserve-unknown-fields": True},
                                 "type": "object"}
    assert status["conditions"]["x-kubernetes-list-type"] == "map"
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    assert status["projectInfo"]["required"] == ["name", "runtime"]
    assert status["lastUpdate"]["properties"]["lastResyncTime"]["format"] == "date-time"
    assert status["nextRetryTime"]["format"] == "date-time"


def test_no_defaults_but_the_workspace_ones() -> None:
    """Only Workspace serviceAccountName/securityProfile have CRD defaults among our own fields (everything else
    with a default is inside an embedded Kubernetes core type)."""
    ours = {}
    for file_name, manifest in ALL.items():
        root = _root(manifest)

        def visit(node: dict[str, Any], path: str, file_name: str = file_name) -> None:
            if "x-kubernetes-map-type" in node and "key" in node.get("properties", {}):
                return  # core SecretKeySelector & co.
            for name, prop in node.get("properties", {}).items():
                if name in ("podTemplate", "env", "envFrom", "resources"):
                    continue
                if "default" in prop:
                    ours[f"{file_name}:{path}.{name}"] = prop["default"]
                visit(prop, f"{path}.{name}")
                for key in ("items", "additionalProperties"):
                    if isinstance(prop.get(key), dict):
                        visit(prop[key], f"{path}.{name}[]")

        visit(root, "")
    assert ours == {
        "auto.pulumi.com_workspaces.yaml:.spec.serviceAccountName": "default",
        "auto.pulumi.com_workspaces.yaml:.spec.securityProfile": "restricted",
    }


def test_workspace_schema() -> None:
    workspaces = crds.workspaces()
    assert _columns(workspaces) == [
        ("Image", ".spec.image", "string", 0),
        ("Ready", '.status.conditions[?(@.type=="Ready")].status', "string", 0),
        ("Address", ".status.address", "string", 0),
    ]
    spec = _at(_root(workspaces), "spec")["properties"]
    assert spec["securityProfile"] == {"default": "restricted", "type": "string"}  # no enum, as in the Go CRD
    assert spec["env"]["x-kubernetes-list-type"] == "map"
    assert spec["env"]["x-kubernetes-list-map-keys"] == ["name"]
    assert spec["env"]["items"]["required"] == ["name"]
    assert spec["envFrom"]["x-kubernetes-list-type"] == "atomic"
    assert spec["stacks"]["x-kubernetes-list-map-keys"] == ["name"]
    config = spec["stacks"]["items"]["properties"]["config"]
    assert config["x-kubernetes-list-map-keys"] == ["key"]
    assert config["items"]["x-kubernetes-map-type"] == "atomic"
    assert config["items"]["properties"]["value"] == {"x-kubernetes-preserve-unknown-fields": True}
    assert sorted(config["items"]["properties"]["valueFrom"]["properties"]) == ["env", "json", "path"]
    assert spec["pulumiLogLevel"] == {"description": spec["pulumiLogLevel"]["description"], "format": "int32",
                                      "type": "integer"}
    assert spec["podTemplate"]["properties"]["spec"]["required"] == ["containers"]
    assert sorted(spec["serviceTemplate"]["properties"]["metadata"]["properties"]) == ["annotations", "labels"]
    assert spec["projectInfo"]["required"] == ["name", "runtime"]
    assert spec["git"]["properties"]["auth"]["properties"]["githubApp"]["required"] == [
        "appID", "installationID", "privateKey"]
    status = _at(_root(workspaces), "status")["properties"]
    # `applied` is pko's (docs/config-without-restart.md), optional
    assert sorted(status) == ["address", "applied", "conditions", "observedGeneration", "pulumiVersion"]


def test_workspace_template_is_an_apply_configuration() -> None:
    template = _at(_root(crds.stacks()), "spec.workspaceTemplate")
    assert sorted(template["properties"]) == ["apiVersion", "kind", "metadata", "spec", "status"]
    meta = template["properties"]["metadata"]["properties"]
    assert {"labels", "annotations", "name", "namespace", "ownerReferences", "finalizers"} <= set(meta)
    spec = template["properties"]["spec"]["properties"]
    assert spec["securityProfile"] == {"type": "string"}
    assert spec["serviceAccountName"] == {"type": "string"}
    assert "x-kubernetes-list-type" not in spec["stacks"]
    assert "x-kubernetes-list-type" not in spec["env"]
    assert "required" not in spec["stacks"]["items"]
    # Core types keep their full schema.
    workspace_spec = _at(_root(crds.workspaces()), "spec")["properties"]
    assert spec["podTemplate"]["properties"]["spec"] == workspace_spec["podTemplate"]["properties"]["spec"]
    assert spec["env"]["items"] == workspace_spec["env"]["items"]
    assert spec["resources"] == {k: v for k, v in workspace_spec["resources"].items() if k != "description"}
    conditions = template["properties"]["status"]["properties"]["conditions"]["items"]
    assert "required" not in conditions
    assert conditions["properties"]["status"] == {"type": "string"}


def test_update_template_is_an_apply_configuration() -> None:
    template = _at(_root(crds.stacks()), "spec.updateTemplate")
    spec = template["properties"]["spec"]["properties"]
    assert "runProgram" in spec
    assert spec["ttlAfterCompleted"]["type"] == "string"


def test_program_schema() -> None:
    programs = crds.programs()
    assert _columns(programs) == [("Age", ".metadata.creationTimestamp", "date", 0),
                                  ("URL", ".status.artifact.url", "string", 0)]
    root = _root(programs)
    assert "spec" not in root["properties"]
    program = root["properties"]["program"]["properties"]
    assert sorted(program) == ["configuration", "outputs", "packages", "resources", "variables"]
    resource = program["resources"]["additionalProperties"]
    assert resource["required"] == ["type"]
    assert resource["properties"]["type"]["minLength"] == 1
    assert resource["properties"]["get"]["required"] == ["id"]
    assert resource["properties"]["properties"]["additionalProperties"] == {"x-kubernetes-preserve-unknown-fields":
                                                                             True}
    options = resource["properties"]["options"]["properties"]
    assert sorted(options) == sorted(["additionalSecretOutputs", "aliases", "customTimeouts", "deleteBeforeReplace",
                                      "dependsOn", "ignoreChanges", "import", "parent", "protect", "provider",
                                      "providers", "version"])
    assert program["configuration"]["additionalProperties"]["properties"]["type"]["enum"] == [
        "String", "Number", "List<Number>", "List<String>"]
    artifact = _at(root, "status.artifact")
    assert artifact["required"] == ["lastUpdateTime", "path", "revision", "url"]
    assert artifact["properties"]["digest"]["pattern"] == r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$"


def test_update_schema() -> None:
    updates = crds.updates()
    assert _columns(updates) == [
        ("Workspace", ".spec.workspaceName", "string", 0),
        ("Type", ".spec.type", "string", 10),
        ("Start Time", ".status.startTime", "date", 10),
        ("End Time", ".status.endTime", "date", 10),
        ("Progressing", '.status.conditions[?(@.type=="Progressing")].status', "string", 0),
        ("Failed", '.status.conditions[?(@.type=="Failed")].status', "string", 0),
        ("Complete", '.status.conditions[?(@.type=="Complete")].status', "string", 0),
        ("URL", ".status.permalink", "string", 0),
    ]
    spec = _at(_root(updates), "spec")["properties"]
    assert sorted(spec) == sorted(["workspaceName", "stackName", "type", "ttlAfterCompleted", "parallel", "message",
                                   "expectNoChanges", "replace", "target", "targetDependents", "refresh",
                                   "continueOnError", "remove", "runProgram",
                                   # pko's addition (the reference's PR#1296 name), on the parity test's list
                                   "idleTimeout", "timeout"])
    assert "enum" not in spec["type"]
    assert "0s: the operation may stay silent" in spec["idleTimeout"]["x-kubernetes-validations"][0]["message"]
    assert "0s: the operation may run for ever" in spec["timeout"]["x-kubernetes-validations"][0]["message"]
    assert spec["parallel"]["format"] == "int32"
    status = _at(_root(updates), "status")["properties"]
    # resourceChanges: pko's addition (docs/metrics.md), on the parity test's list of additions
    assert sorted(status) == sorted(["observedGeneration", "startTime", "endTime", "permalink", "message",
                                     "outputs", "conditions", "projectInfo", "resourceChanges",
                                     "drift"])  # pko: drift-check Updates only (docs/drift-detection.md)
    assert status["conditions"]["x-kubernetes-list-type"] == "map"
