"""`workspace.desired` and `updates.build`: the Workspace and the Update a Stack implies (pko-v2 §3.1 steps 2, 5, 6,
12), state in, objects out."""

from __future__ import annotations

from typing import Any

import pytest

from pko.api import names
from pko.api import stack as stack_api
from pko.api import workspace as ws_api
from pko.controllers.stack import updates
from pko.controllers.stack import workspace as ws_build

CM = "/var/run/configmaps/stacks.pulumi.com/configmaps/"
SECRETS = "/var/run/secrets/stacks.pulumi.com/secrets/"


def _stack(deleting: bool = False, **spec: Any) -> stack_api.Stack:
    meta: dict[str, Any] = {"name": "app", "namespace": "ns", "uid": "uid-1", "generation": 1}
    if deleting:
        meta["deletionTimestamp"] = "2025-03-01T12:00:00Z"
    return stack_api.Stack.model_validate({"apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": meta,
                                           "spec": {"stack": "org/dev", **spec}})


def _desired(source: ws_build.Source | None = None, **spec: Any) -> dict[str, Any]:
    return ws_build.desired(_stack(**spec), source or ws_build.Source())


def _secret(name: str, key: str, namespace: str | None = None) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": name, "key": key}
    if namespace is not None:
        ref["namespace"] = namespace
    return {"type": "Secret", "secret": ref}


def _literal(value: str) -> dict[str, Any]:
    return {"type": "Literal", "literal": {"value": value}}


# --- the Workspace -----------------------------------------------------------------------------------------------

def test_minimal_workspace_is_the_references_skeleton() -> None:
    assert _desired() == {
        "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace",
        "metadata": {
            "name": "app", "namespace": "ns",
            "labels": {names.LABEL_COMPONENT: "stack", names.LABEL_STACK_NAME: "app"},
            "ownerReferences": [{"apiVersion": "pulumi.com/v1", "kind": "Stack", "name": "app", "uid": "uid-1",
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "podTemplate": {"spec": {"containers": [{"name": "pulumi"}]}},
            "stacks": [{"name": "org/dev", "create": True}],
        },
    }


def test_stack_entry_carries_create_environment_and_secrets_provider() -> None:
    ws = _desired(useLocalStackOnly=True, environment=["proj/env-a", "proj/env-b"], secretsProvider="passphrase")
    assert ws["spec"]["stacks"] == [{"name": "org/dev", "create": False, "environment": ["proj/env-a", "proj/env-b"],
                                     "secretsProvider": "passphrase"}]


def test_env_order_is_backend_then_access_token_then_sorted_env_refs() -> None:
    ws = _desired(backend="file:///state", accessTokenSecret="token-secret", serviceAccountName="runner",
                  envRefs={"ZED": _literal("z"), "ALPHA": _secret("creds", "alpha"), "MID": _literal("m")})
    assert ws["spec"]["serviceAccountName"] == "runner"
    assert ws["spec"]["env"] == [
        {"name": "PULUMI_BACKEND_URL", "value": "file:///state"},
        {"name": "PULUMI_ACCESS_TOKEN", "valueFrom": {"secretKeyRef": {"name": "token-secret", "key": "accessToken"}}},
        {"name": "ALPHA", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "alpha"}}},
        {"name": "MID", "value": "m"},
        {"name": "ZED", "value": "z"},
    ]


def test_env_ref_to_a_secret_in_the_stacks_own_namespace_is_allowed() -> None:
    ws = _desired(envRefs={"X": _secret("creds", "x", namespace="ns")})
    assert ws["spec"]["env"] == [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "x"}}}]


def test_config_groups_come_in_the_references_order_each_sorted() -> None:
    ws = _desired(
        config={"b": "two", "a": {"nested": [1, 2]}},
        configRef={"z": {"name": "cm1", "key": "zz"}, "y": {"name": "cm2", "key": "yy", "json": True},
                   "x": {"name": "cm1", "key": "xx", "json": False}},
        secrets={"s2": "v2", "s1": "v1"},
        secretsRef={"r2": _secret("sec", "k2"), "r1": _literal("lit"), "r3": _secret("sec", "k3")},
    )
    assert ws["spec"]["stacks"][0]["config"] == [
        {"key": "a", "value": {"nested": [1, 2]}, "secret": False},
        {"key": "b", "value": "two", "secret": False},
        {"key": "x", "valueFrom": {"path": CM + "cm1/xx", "json": False}, "secret": False},
        {"key": "y", "valueFrom": {"path": CM + "cm2/yy", "json": True}, "secret": False},
        {"key": "z", "valueFrom": {"path": CM + "cm1/zz"}, "secret": False},
        {"key": "s1", "value": "v1", "secret": True},
        {"key": "s2", "value": "v2", "secret": True},
        {"key": "r1", "value": "lit", "secret": True},
        {"key": "r2", "valueFrom": {"path": SECRETS + "sec/k2"}, "secret": True},
        {"key": "r3", "valueFrom": {"path": SECRETS + "sec/k3"}, "secret": True},
    ]
    pod = ws["spec"]["podTemplate"]["spec"]
    # One volume and mount per ConfigMap / Secret, in the order first used.
    assert pod["containers"] == [{"name": "pulumi", "volumeMounts": [
        {"name": "configmap-cm1", "mountPath": CM + "cm1"},
        {"name": "configmap-cm2", "mountPath": CM + "cm2"},
        {"name": "secret-sec", "mountPath": SECRETS + "sec"},
    ]}]
    assert pod["volumes"] == [
        {"name": "configmap-cm1", "configMap": {"name": "cm1"}},
        {"name": "configmap-cm2", "configMap": {"name": "cm2"}},
        {"name": "secret-sec", "secret": {"secretName": "sec"}},
    ]


def test_sources_go_into_the_workspace() -> None:
    git = {"url": "https://git/x", "ref": "abc"}
    assert _desired(ws_build.Source(git=git))["spec"]["git"] == git
    flux = {"url": "http://src/a.tgz", "digest": "sha256:00"}
    assert _desired(ws_build.Source(flux=flux))["spec"]["flux"] == flux
    info = {"name": "proj", "runtime": "python"}
    ws = _desired(ws_build.Source(project_info=info))
    assert ws["spec"]["projectInfo"] == info
    assert "git" not in ws["spec"]
    assert "flux" not in ws["spec"]


def test_workspace_template_merges_strategically_and_the_stack_entry_comes_after_it() -> None:
    ws = _desired(
        envRefs={"A": _literal("a")},
        config={"k": "v"},
        configRef={"c": {"name": "cm", "key": "c"}},
        workspaceTemplate={
            "metadata": {"labels": {"team": "blue"}},
            "spec": {
                "image": "pulumi/pulumi:3.200.0",
                "env": [{"name": "B", "value": "b"}, {"name": "A", "value": "overridden"}],
                "podTemplate": {"spec": {
                    "containers": [{"name": "pulumi", "resources": {"limits": {"memory": "1Gi"}}}],
                    "volumes": [{"name": "extra", "emptyDir": {}}],
                }},
                "stacks": [{"name": "from-template"}],
                "envFrom": [{"configMapRef": {"name": "template-env"}}],
            },
        },
        envs=["legacy-env"], envSecrets=["legacy-secret"],
    )
    assert ws["metadata"]["labels"] == {names.LABEL_COMPONENT: "stack", names.LABEL_STACK_NAME: "app", "team": "blue"}
    spec = ws["spec"]
    assert spec["image"] == "pulumi/pulumi:3.200.0"
    assert {e["name"]: e["value"] for e in spec["env"]} == {"A": "overridden", "B": "b"}
    (pulumi,) = spec["podTemplate"]["spec"]["containers"]
    assert pulumi["resources"] == {"limits": {"memory": "1Gi"}}
    assert pulumi["volumeMounts"] == [{"name": "configmap-cm", "mountPath": CM + "cm"}]
    assert {v["name"] for v in spec["podTemplate"]["spec"]["volumes"]} == {"configmap-cm", "extra"}
    assert [s["name"] for s in spec["stacks"]] == ["from-template", "org/dev"]
    assert spec["stacks"][-1]["config"][0] == {"key": "k", "value": "v", "secret": False}
    # The deprecated envs/envSecrets are appended after the template's envFrom.
    assert spec["envFrom"] == [{"configMapRef": {"name": "template-env"}}, {"configMapRef": {"name": "legacy-env"}},
                               {"secretRef": {"name": "legacy-secret"}}]


def test_the_workspace_template_cannot_take_the_workspace_away_from_its_stack() -> None:
    ws = _desired(workspaceTemplate={"metadata": {"name": "other"}, "spec": {"serviceAccountName": "t"}})
    assert ws["metadata"]["ownerReferences"][0]["name"] == "app"
    assert ws["spec"]["serviceAccountName"] == "t"


@pytest.mark.parametrize(("spec", "message"), [
    ({"envRefs": {"X": {"type": "Env", "env": {"name": "HOME"}}}}, 'ref type "Env" is deprecated'),
    ({"envRefs": {"X": {"type": "FS", "filesystem": {"path": "/etc/passwd"}}}}, 'ref type "FS" is deprecated'),
    ({"envRefs": {"X": _secret("s", "k", namespace="other")}}, "cross-namespace refs are not allowed"),
    ({"secretsRef": {"x": {"type": "Env", "env": {"name": "HOME"}}}}, 'ref type "Env" is deprecated'),
    ({"secretsRef": {"x": {"type": "FS", "filesystem": {"path": "/etc/passwd"}}}}, 'ref type "FS" is deprecated'),
    ({"secretsRef": {"x": _secret("s", "k", namespace="other")}}, "cross-namespace refs are not allowed"),
    ({"envRefs": {"X": {"type": "Literal"}}},
     'resolving env variable reference for "X": missing literal reference in ResourceRef'),
    ({"envRefs": {"X": {"type": "Secret"}}},
     'resolving env variable reference for "X": missing secret reference in ResourceRef'),
    ({"envRefs": {"X": {"type": "Bogus"}}},
     'resolving env variable reference for "X": unsupported selector type: Bogus'),
    ({"secretsRef": {"x": {"type": "Literal"}}}, 'updating secretRef for "x": missing reference in ResourceRef'),
    ({"secretsRef": {"x": {"type": "Bogus"}}}, 'updating secretRef for "x": missing reference in ResourceRef'),
])
def test_refs_the_reference_refuses_are_stall_errors_with_its_messages(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ws_build.StallError) as raised:
        _desired(**spec)
    assert str(raised.value) == message


def test_the_first_bad_env_ref_in_sorted_order_is_reported() -> None:
    with pytest.raises(ws_build.StallError, match="Env"):
        _desired(envRefs={"B": {"type": "FS", "filesystem": {"path": "/x"}},
                          "A": {"type": "Env", "env": {"name": "Y"}}})


# --- git source and its validation -------------------------------------------------------------------------------

def _spec(**spec: Any) -> stack_api.StackSpec:
    return stack_api.spec_of(_stack(**spec))


def test_git_source_names_the_commit_dir_and_shallow() -> None:
    spec = _spec(projectRepo="https://git/x", branch="main", repoDir="infra/app", shallow=True)
    assert ws_build.git_source(spec, "abc") == {"url": "https://git/x", "ref": "abc", "dir": "infra/app",
                                                 "shallow": True}


def test_git_auth_secret_becomes_optional_selectors() -> None:
    auth = ws_build.git_source(_spec(projectRepo="u", commit="c", gitAuthSecret="creds"), "c")["auth"]
    assert auth == {
        "sshPrivateKey": {"name": "creds", "key": "sshPrivateKey", "optional": True},
        "password": {"name": "creds", "key": "password", "optional": True},
        "username": {"name": "creds", "key": "username", "optional": True},
        "token": {"name": "creds", "key": "accessToken", "optional": True},
    }


def test_git_auth_precedence_is_ssh_then_token_then_github_app_then_basic() -> None:
    every = {
        "sshAuth": {"sshPrivateKey": _secret("ssh", "key"), "password": _secret("ssh", "pw")},
        "accessToken": _secret("tok", "t"),
        "githubApp": {"appID": _secret("app", "id"), "installationID": _secret("app", "inst"),
                      "privateKey": _secret("app", "pem")},
        "basicAuth": {"userName": _secret("basic", "u"), "password": _secret("basic", "p")},
    }

    def auth(**git_auth: Any) -> dict[str, Any]:
        result: dict[str, Any] = ws_build.git_source(_spec(projectRepo="u", commit="c", gitAuth=git_auth), "c")["auth"]
        return result

    assert auth(**every) == {"sshPrivateKey": {"name": "ssh", "key": "key"}, "password": {"name": "ssh", "key": "pw"}}
    rest = {k: v for k, v in every.items() if k != "sshAuth"}
    assert auth(**rest) == {"token": {"name": "tok", "key": "t"}}
    rest.pop("accessToken")
    assert auth(**rest) == {"githubApp": {"appID": {"name": "app", "key": "id"},
                                          "installationID": {"name": "app", "key": "inst"},
                                          "privateKey": {"name": "app", "key": "pem"}}}
    rest.pop("githubApp")
    assert auth(**rest) == {"username": {"name": "basic", "key": "u"}, "password": {"name": "basic", "key": "p"}}


@pytest.mark.parametrize(("spec", "message"), [
    ({"branch": "main"}, 'missing "projectRepo"'),
    ({"projectRepo": "u"}, 'missing "commit" or "branch"'),
    ({"projectRepo": "u", "commit": "c", "branch": "main"}, 'only one of "commit" or "branch" should be specified'),
])
def test_git_validation_messages(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ws_build.StallError) as raised:
        ws_build.validate_git(_spec(**spec))
    assert str(raised.value) == message


def test_valid_git_specs_pass() -> None:
    ws_build.validate_git(_spec(projectRepo="u", commit="c"))
    ws_build.validate_git(_spec(projectRepo="u", branch="refs/heads/main"))


# --- the Update --------------------------------------------------------------------------------------------------

WORKSPACE = {"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace",
             "metadata": {"name": "app", "namespace": "ns", "uid": "ws-uid"}}


def _build(stack: stack_api.Stack, message: str = "Initial stack update",
           millis: int = 0x18f3a2b4c5d) -> dict[str, Any]:
    return updates.build(stack, ws_api.Workspace.model_validate(WORKSPACE), message, millis)


def test_up_update_has_the_references_shape() -> None:
    update = _build(_stack(targets=["urn:a", "urn:b"], targetDependents=True, refresh=True))
    assert update == {
        "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update",
        "metadata": {
            "name": "app-18f3a2b4c5d", "namespace": "ns",
            "labels": {names.LABEL_COMPONENT: "stack", names.LABEL_STACK_NAME: "app"},
            "ownerReferences": [
                {"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace", "name": "app", "uid": "ws-uid",
                 "controller": True, "blockOwnerDeletion": True},
                {"apiVersion": "pulumi.com/v1", "kind": "Stack", "name": "app", "uid": "uid-1",
                 "blockOwnerDeletion": True},
            ],
        },
        "spec": {"workspaceName": "app", "stackName": "org/dev", "type": "up", "ttlAfterCompleted": "24h0m0s",
                 "message": "Initial stack update", "target": ["urn:a", "urn:b"], "targetDependents": True,
                 "refresh": True},
    }


def test_up_update_defaults_are_explicit_false_and_no_targets() -> None:
    spec = _build(_stack())["spec"]
    assert spec["targetDependents"] is False
    assert spec["refresh"] is False
    assert "target" not in spec
    assert "runProgram" not in spec


def test_preview_stack_gets_a_preview_update() -> None:
    spec = _build(_stack(preview=True, refresh=True))["spec"]
    assert spec["type"] == "preview"
    assert spec["refresh"] is True


@pytest.mark.parametrize("run_program", [False, True])
def test_deleting_stack_gets_a_destroy_without_up_fields(run_program: bool) -> None:
    spec = _build(_stack(deleting=True, runProgram=run_program, targets=["urn:a"], refresh=True,
                         destroyOnFinalize=True), message="Stack marked for deletion")["spec"]
    assert spec == {"workspaceName": "app", "stackName": "org/dev", "type": "destroy", "ttlAfterCompleted": "24h0m0s",
                    "message": "Stack marked for deletion", "runProgram": run_program}


def test_kind_for_follows_deletion_then_preview() -> None:
    assert updates.kind_for(_stack()) == "up"
    assert updates.kind_for(_stack(preview=True)) == "preview"
    assert updates.kind_for(_stack(preview=True, deleting=True)) == "destroy"


def test_update_template_is_merged_over_the_generated_update() -> None:
    update = _build(_stack(targets=["urn:a"], updateTemplate={
        "metadata": {"labels": {"team": "blue"}, "annotations": {"note": "x"}},
        "spec": {"ttlAfterCompleted": "1h", "parallel": 4, "target": ["urn:b"], "expectNoChanges": True},
    }))
    assert update["metadata"]["labels"] == {names.LABEL_COMPONENT: "stack", names.LABEL_STACK_NAME: "app",
                                            "team": "blue"}
    assert update["metadata"]["annotations"] == {"note": "x"}
    assert update["spec"]["ttlAfterCompleted"] == "1h"
    assert update["spec"]["parallel"] == 4
    assert update["spec"]["expectNoChanges"] is True
    assert update["spec"]["target"] == ["urn:b"]
    assert update["spec"]["type"] == "up"
    assert [r["kind"] for r in update["metadata"]["ownerReferences"]] == ["Workspace", "Stack"]


def test_update_names_are_stack_name_and_hex_millis() -> None:
    assert _build(_stack(), millis=255)["metadata"]["name"] == "app-ff"


def test_the_workspace_and_updates_carry_the_labels_the_operator_s_watch_selector_looks_at() -> None:
    """An operator started with `--watch-label-selector team=a` selects a Stack labelled team=a; the Workspace and
    Updates it makes for it must carry `team: a`, or its own watches would never see them (the Stack would wait for
    ever); other labels of the Stack stay on the Stack."""
    from pko.runtime import sharding
    team = sharding.shard(watch_label_selector="team=a")
    stack = _stack()
    stack.metadata.labels = {"team": "a", "app": "web"}
    ws = ws_build.desired(stack, ws_build.Source(), shard=team)
    assert ws["metadata"]["labels"] == {**names.stack_component_labels("app"), "team": "a"}
    assert team.owns(ws)
    update = updates.build(stack, ws_api.Workspace.model_validate(WORKSPACE), "m", 1, shard=team)
    assert update["metadata"]["labels"] == {**names.stack_component_labels("app"), "team": "a"}
    assert team.owns(update)
    # the Workspace names the operator's Lease: a shard taking it over asks that Lease whether its operator is gone
    assert ws["metadata"]["annotations"] == {names.ANNOTATION_SHARD_LEASE: team.lease_name("operator.pulumi.com")}
    # an operator that watches everything carries only the shard label, as before, and names no Lease
    everything = ws_build.desired(stack, ws_build.Source())
    assert "team" not in everything["metadata"]["labels"]
    assert "annotations" not in everything["metadata"]
