"""The models speak the Go operator's JSON: wire names through aliases, ``by_alias=True, exclude_none=True``,
unknown keys kept, and every example manifest reads and writes back unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from pko.api import program, stack, update, workspace
from pko.api.meta import Wire

MANIFEST_DIR = Path(__file__).resolve().parents[2] / "integration" / "api" / "manifests"
MODELS: dict[str, type[Wire]] = {"Stack": stack.Stack, "Program": program.Program,
                                 "Workspace": workspace.Workspace, "Update": update.Update}
EXAMPLES = [(p.name, d) for p in sorted(MANIFEST_DIR.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text())]


@pytest.mark.parametrize(("file_name", "manifest"), EXAMPLES, ids=[n for n, _ in EXAMPLES])
def test_example_manifests_round_trip_through_the_models(file_name: str, manifest: dict[str, Any]) -> None:
    model = MODELS[manifest["kind"]].model_validate(manifest)
    expected = manifest
    if manifest["kind"] == "Workspace":  # the model carries the CRD defaults, as the API server would
        expected = {**manifest, "spec": {"serviceAccountName": "default", "securityProfile": "restricted",
                                         **manifest["spec"]}}
    assert model.to_wire() == expected


def test_wire_names() -> None:
    spec = stack.StackSpec(
        stack="acme/app/dev",
        env_secrets=["s"],
        secrets_ref={"k": stack.ResourceRef(type="Literal", literal=stack.LiteralRef(value="v"))},
        config_ref={"c": stack.ConfigMapRef(name="cm", key="k", json_=True)},
        git_auth=stack.GitAuthConfig(
            basic_auth=stack.BasicAuth(user_name=stack.ResourceRef(type="Env", env=stack.EnvSelector(name="U")),
                                       password=stack.ResourceRef(type="Env", env=stack.EnvSelector(name="P"))),
            github_app=stack.GitHubAppConfig(
                app_id=stack.ResourceRef(type="Literal", literal=stack.LiteralRef(value="1")),
                installation_id=stack.ResourceRef(type="Literal", literal=stack.LiteralRef(value="2")),
                private_key=stack.ResourceRef(type="Literal", literal=stack.LiteralRef(value="3")))),
        resync_frequency_seconds=60,
    )
    wire = spec.to_wire()
    assert wire["envSecrets"] == ["s"]
    assert wire["secretsRef"] == {"k": {"type": "Literal", "literal": {"value": "v"}}}
    assert wire["configRef"] == {"c": {"name": "cm", "key": "k", "json": True}}
    assert wire["gitAuth"]["basicAuth"]["userName"] == {"type": "Env", "env": {"name": "U"}}
    assert sorted(wire["gitAuth"]["githubApp"]) == ["appID", "installationID", "privateKey"]
    assert wire["resyncFrequencySeconds"] == 60
    assert "backend" not in wire  # None is never sent
    assert stack.StackSpec.model_validate(wire) == spec


def test_program_import_option_and_workspace_json_flag() -> None:
    options = program.Options.model_validate({"import": "bucket-id", "dependsOn": ["${a}"]})
    assert options.import_ == "bucket-id"
    assert options.to_wire() == {"import": "bucket-id", "dependsOn": ["${a}"]}
    value_from = workspace.ConfigValueFrom.model_validate({"env": "X", "json": True})
    assert value_from.json_ is True
    assert value_from.to_wire() == {"env": "X", "json": True}


def test_unknown_keys_survive_a_round_trip() -> None:
    """Fields a newer operator might add (or metadata we do not model) are kept on read-modify-write."""
    raw = {"apiVersion": "pulumi.com/v1", "kind": "Stack",
           "metadata": {"name": "s", "selfLink": "/x", "labels": {"a": "b"}},
           "spec": {"stack": "o/p/s", "futureField": {"x": 1}},
           "status": {"futureStatus": True}}
    assert stack.Stack.model_validate(raw).to_wire() == raw


def test_stack_config_accepts_any_json_like_the_crd() -> None:
    assert stack.StackSpec.model_validate({"stack": "s", "config": ["not", "a", "map"]}).config == ["not", "a",
                                                                                                    "map"]


def test_defaults_of_a_new_workspace_and_kind_identity() -> None:
    ws = workspace.Workspace(metadata={"name": "w"}, spec=workspace.WorkspaceSpec())
    assert ws.to_wire() == {"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace", "metadata": {"name": "w"},
                            "spec": {"serviceAccountName": "default", "securityProfile": "restricted"}}
    assert stack.Stack().to_wire() == {"apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": {}}
    assert program.Program().kind == "Program"
    assert update.Update().api_version == "auto.pulumi.com/v1alpha1"
