"""pko's `spec.outputs`, end to end (real API server, real pulumi CLI): after a successful update the Stack's
outputs are in a Secret and a ConfigMap it owns, and follow the next update; a secret output never reaches a
ConfigMap (left out and named when there is no Secret); structured outputs are JSON, templates interpolate; a
missing output or a name taken by someone else's object is an `OutputsPublished=False` condition with a Warning
event, never a crash or an overwrite; deleting the Stack deletes them (the real garbage collector). A Stack without
`spec.outputs` behaves as with the Go operator: its status and the Update's outputs Secret only."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import lightkube
import pytest
import stack_e2e as e2e

from pko.kube import client as kclient
from pko.kube import objects, resources
from pko.testing import controlplane, gitserver, operator

SETTINGS = {"replicas": 2, "hosts": ["a", "b"]}
SECRET_VALUE = "s3cr3t-value"
CONDITION = "OutputsPublished"


def _literal(value: str) -> dict[str, Any]:
    return {"type": "Literal", "literal": {"value": value}}


def _secret_data(secret: dict[str, Any]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


def _published(obj: dict[str, Any]) -> dict[str, Any]:
    return e2e.condition(obj, CONDITION)


def _settled_with(status: str) -> Any:
    """Ready for the current generation, with the outputs condition at `status`."""
    return lambda o: e2e.is_ready(o) and _published(o).get("status") == status


def _controlled_by(obj: dict[str, Any], stack: dict[str, Any]) -> bool:
    refs = obj["metadata"].get("ownerReferences") or []
    return [(r["kind"], r["name"], r["uid"], r.get("controller")) for r in refs] == [
        ("Stack", stack["metadata"]["name"], stack["metadata"]["uid"], True)]


async def _warnings(kc: kclient.Client, name: str, namespace: str) -> list[str]:
    return [e["message"] for e in await e2e.events_of(kc, name, namespace)
            if e["reason"] == "OutputsNotPublished" and e["type"] == "Warning"]


async def _no_secret_value_anywhere(kc: kclient.Client, stack: dict[str, Any], namespace: str) -> None:
    """The secret output's value is in no status, condition, event or ConfigMap."""
    assert SECRET_VALUE not in json.dumps(stack["status"])
    for event in await e2e.events_of(kc, stack["metadata"]["name"], namespace):
        assert SECRET_VALUE not in event["message"]
    for config_map in (await kc.list(resources.CONFIG_MAP, namespace)).items:
        assert SECRET_VALUE not in json.dumps(config_map.get("data") or {})


async def test_outputs_are_published_to_a_secret_and_a_configmap_and_follow_updates(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
) -> None:
    repo = f"outputs-{namespace}"
    commit = e2e.create_repo(git, repo, marker="v1")
    await kc.create(e2e.git_stack(
        "app", namespace, git.http_url(repo), commit=commit,
        config={"greeting": "hello", "settings": json.dumps(SETTINGS)},
        secretsRef={"literalSecret": _literal(SECRET_VALUE)},
        outputs={"secretName": "app-outputs", "configMapName": "app-settings",
                 "template": {"summary": "{{ .outputs.greeting }} from {{.outputs.marker}}",
                              "first-host": "{{ .outputs.settings.hosts.0 }}",
                              "dsn": "postgres://app:{{ .outputs.literalSecret }}@db:5432/app"}}))
    stack = await e2e.wait_for(kc, resources.STACK, "app", namespace, _settled_with("True"), timeout=180)

    # `keys` left out: every output; the Secret has them all and the templates, strings as is, others as JSON.
    secret = await kc.get(resources.SECRET, "app-outputs", namespace)
    assert secret["type"] == "Opaque"
    everything = {"greeting": "hello", "marker": "v1", "settings": json.dumps(SETTINGS, separators=(",", ":"),
                                                                              sort_keys=True),
                  "literalSecret": SECRET_VALUE, "summary": "hello from v1", "first-host": "a",
                  "dsn": f"postgres://app:{SECRET_VALUE}@db:5432/app"}
    assert _secret_data(secret) == everything
    assert json.loads(_secret_data(secret)["settings"]) == SETTINGS
    # The ConfigMap: everything that holds no secret (the secret output and the template using it stay out).
    config_map = await kc.get(resources.CONFIG_MAP, "app-settings", namespace)
    assert config_map["data"] == {k: v for k, v in everything.items() if k not in ("literalSecret", "dsn")}
    assert _controlled_by(secret, stack)
    assert _controlled_by(config_map, stack)
    first_update = e2e.last_update(stack)["name"]
    assert objects.annotations_of(secret)["pulumi.com/update-name"] == first_update
    condition = _published(stack)
    assert condition["reason"] == "Published"
    assert condition["message"] == (
        "published to Secret app-outputs (keys: dsn, first-host, greeting, literalSecret, marker, settings, "
        "summary) and ConfigMap app-settings (keys: first-host, greeting, marker, settings, summary)")
    # What the Go operator gives stays as it was: masked status.outputs and the Update's own outputs Secret.
    assert stack["status"]["outputs"]["literalSecret"] == "[secret]"
    updates = await e2e.updates_of(kc, "app", namespace)
    assert (await e2e.outputs_of(kc, updates[-1]))["literalSecret"] == SECRET_VALUE
    await _no_secret_value_anywhere(kc, stack, namespace)

    # The next update rewrites the same objects: new values, and only the selected keys (the rest go away).
    await kc.patch(resources.STACK, "app", {"spec": {
        "config": {"greeting": "bonjour", "settings": json.dumps(SETTINGS)},
        "outputs": {"keys": ["greeting", "literalSecret"], "template": None}}}, namespace)
    stack = await e2e.wait_for(kc, resources.STACK, "app", namespace,
                               lambda o: _settled_with("True")(o) and e2e.last_update(o)["name"] != first_update,
                               timeout=180)
    updated = await kc.get(resources.SECRET, "app-outputs", namespace)
    assert _secret_data(updated) == {"greeting": "bonjour", "literalSecret": SECRET_VALUE}
    assert updated["metadata"]["uid"] == secret["metadata"]["uid"]
    assert objects.annotations_of(updated)["pulumi.com/update-name"] == e2e.last_update(stack)["name"]
    assert (await kc.get(resources.CONFIG_MAP, "app-settings", namespace))["data"] == {"greeting": "bonjour"}
    assert not await _warnings(kc, "app", namespace)
    await _no_secret_value_anywhere(kc, stack, namespace)


async def test_a_configmap_alone_never_gets_a_secret_and_a_missing_output_is_reported(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
) -> None:
    repo = f"outputs-cm-{namespace}"
    commit = e2e.create_repo(git, repo, marker="v1")
    await kc.create(e2e.git_stack(
        "cm", namespace, git.http_url(repo), commit=commit, config={"greeting": "hello"},
        secretsRef={"literalSecret": _literal(SECRET_VALUE)}, outputs={"configMapName": "cm-outputs"}))
    stack = await e2e.wait_for(kc, resources.STACK, "cm", namespace, _settled_with("True"), timeout=180)
    config_map = await kc.get(resources.CONFIG_MAP, "cm-outputs", namespace)
    assert config_map["data"] == {"greeting": "hello", "marker": "v1"}
    assert _published(stack)["message"] == ("published to ConfigMap cm-outputs (keys: greeting, marker); secret "
                                            "outputs left out of the ConfigMap (no secretName): literalSecret")
    first_update = e2e.last_update(stack)["name"]

    # A renamed output: the update succeeds (Ready), publishing does not, says why, and leaves the ConfigMap as
    # the last successful publication wrote it.
    await kc.patch(resources.STACK, "cm", {"spec": {"outputs": {
        "keys": ["greeting", "endpoint"], "template": {"url": "https://{{ .outputs.hostname }}/"}}}}, namespace)
    stack = await e2e.wait_for(kc, resources.STACK, "cm", namespace,
                               lambda o: _settled_with("False")(o) and e2e.last_update(o)["name"] != first_update,
                               timeout=180)
    assert e2e.last_update(stack)["state"] == "succeeded"
    condition = _published(stack)
    assert condition["reason"] == "OutputMissing"
    message = ("output 'endpoint' (spec.outputs.keys) does not exist; output 'hostname' "
               "(spec.outputs.template.url) does not exist; the stack's outputs are: greeting, literalSecret, marker")
    assert condition["message"] == message
    assert await _warnings(kc, "cm", namespace) == [f"Outputs not published: {message}"]
    unchanged = await kc.get(resources.CONFIG_MAP, "cm-outputs", namespace)
    assert unchanged["data"] == config_map["data"]
    assert objects.annotations_of(unchanged)["pulumi.com/update-name"] == first_update
    assert await kc.get_or_none(resources.SECRET, "cm-outputs", namespace) is None
    await _no_secret_value_anywhere(kc, stack, namespace)

    # Without spec.outputs (any more), the next update leaves no condition about it; what was written stays.
    second_update = e2e.last_update(stack)["name"]
    await kc.patch(resources.STACK, "cm", {"spec": {"outputs": None}}, namespace)
    stack = await e2e.wait_for(kc, resources.STACK, "cm", namespace, lambda o: e2e.is_ready(o) and (
        e2e.last_update(o)["name"] != second_update), timeout=180)
    assert not _published(stack)
    assert (await kc.get(resources.CONFIG_MAP, "cm-outputs", namespace))["data"] == config_map["data"]


async def test_an_object_the_stack_does_not_own_is_never_overwritten(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
) -> None:
    repo = f"outputs-taken-{namespace}"
    commit = e2e.create_repo(git, repo)
    theirs = await kc.create(resources.SECRET.new("taken", namespace, stringData={"password": "someone else's"}))
    await kc.create(e2e.git_stack("grabby", namespace, git.http_url(repo), commit=commit,
                                  outputs={"secretName": "taken", "configMapName": "grabby-outputs"}))
    stack = await e2e.wait_for(kc, resources.STACK, "grabby", namespace, _settled_with("False"), timeout=180)
    message = ("Secret taken already exists and is not owned by this Stack; it is never overwritten: choose another "
               "spec.outputs.secretName or remove that Secret")
    assert (_published(stack)["reason"], _published(stack)["message"]) == ("NameConflict", message)
    assert await _warnings(kc, "grabby", namespace) == [f"Outputs not published: {message}"]
    still = await kc.get(resources.SECRET, "taken", namespace)
    assert still["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]
    assert _secret_data(still) == {"password": "someone else's"}
    assert not still["metadata"].get("ownerReferences")
    # Nothing is half-published: the ConfigMap is not written either.
    assert await kc.get_or_none(resources.CONFIG_MAP, "grabby-outputs", namespace) is None

    # The documented way out: remove the other Secret, then request a run; the Stack publishes.
    await kc.delete(resources.SECRET, "taken", namespace)
    await e2e.request_reconcile(kc, "grabby", namespace, "after-removing-taken")
    stack = await e2e.wait_for(kc, resources.STACK, "grabby", namespace, lambda o: _settled_with("True")(o) and (
        e2e.last_update(o).get("reconcileRequest") == "after-removing-taken"), timeout=180)
    mine = await kc.get(resources.SECRET, "taken", namespace)
    assert _controlled_by(mine, stack)
    assert _secret_data(mine) == {"marker": "v1"}
    assert (await kc.get(resources.CONFIG_MAP, "grabby-outputs", namespace))["data"] == {"marker": "v1"}

    # A write the API server refuses (someone made the Secret immutable) is reported, not a failed reconcile.
    await kc.patch(resources.SECRET, "taken", {"immutable": True}, namespace)
    await e2e.request_reconcile(kc, "grabby", namespace, "immutable")
    stack = await e2e.wait_for(kc, resources.STACK, "grabby", namespace, lambda o: _settled_with("False")(o) and (
        e2e.last_update(o).get("reconcileRequest") == "immutable"), timeout=180)
    condition = _published(stack)
    assert condition["reason"] == "WriteFailed"
    assert condition["message"].startswith("could not write Secret taken: "), condition["message"]
    assert e2e.last_update(stack)["state"] == "succeeded"


async def test_without_spec_outputs_the_stack_behaves_as_the_go_operator(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
) -> None:
    repo = f"outputs-none-{namespace}"
    commit = e2e.create_repo(git, repo)
    await kc.create(e2e.git_stack("plain", namespace, git.http_url(repo), commit=commit,
                                  secretsRef={"literalSecret": _literal(SECRET_VALUE)}))
    stack = await e2e.wait_for(kc, resources.STACK, "plain", namespace, e2e.is_ready, timeout=180)
    assert stack["status"]["outputs"] == {"literalSecret": "[secret]", "marker": "v1"}
    assert not _published(stack)
    update = (await e2e.updates_of(kc, "plain", namespace))[-1]
    assert (await e2e.outputs_of(kc, update))["literalSecret"] == SECRET_VALUE
    # The only Secret is the Update's outputs Secret; no ConfigMap was written.
    secrets = [objects.name_of(s) for s in (await kc.list(resources.SECRET, namespace)).items]
    assert secrets == [update["status"]["outputs"]]
    assert not [c for c in (await kc.list(resources.CONFIG_MAP, namespace)).items
                if objects.name_of(c) != "kube-root-ca.crt"]


# --- garbage collection: a control plane of this module's own, with kube-controller-manager ---------------------

@pytest.fixture
async def gc_plane(control_plane_with_kcm: controlplane.ControlPlane) -> AsyncIterator[kclient.Client]:
    async with kclient.Client.connect(lightkube.KubeConfig.from_file(str(control_plane_with_kcm.kubeconfig))) as c:
        await operator.install_crds(c)
        await operator.install_identity(c)
        yield c


async def test_deleting_the_stack_deletes_what_it_published(
    gc_plane: kclient.Client, control_plane_with_kcm: controlplane.ControlPlane, git: gitserver.GitServer,
    tmp_path: Path, pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    kc = gc_plane
    namespace = f"gc-{uuid.uuid4().hex[:8]}"
    await kc.create(resources.NAMESPACE.new(namespace))
    repo = f"outputs-gc-{namespace}"
    commit = e2e.create_repo(git, repo)
    async with operator.running(control_plane_with_kcm.kubeconfig, tmp_path / "workspaces", namespace=namespace):
        await kc.create(e2e.git_stack("doomed", namespace, git.http_url(repo), commit=commit,
                                      outputs={"secretName": "doomed-outputs", "configMapName": "doomed-outputs"}))
        await e2e.wait_for(kc, resources.STACK, "doomed", namespace, _settled_with("True"), timeout=180)
        assert await kc.get_or_none(resources.SECRET, "doomed-outputs", namespace) is not None
        assert await kc.get_or_none(resources.CONFIG_MAP, "doomed-outputs", namespace) is not None
        await kc.delete(resources.STACK, "doomed", namespace)
        await e2e.wait_gone(kc, resources.STACK, "doomed", namespace, timeout=120)
    await e2e.wait_gone(kc, resources.SECRET, "doomed-outputs", namespace, timeout=90)
    await e2e.wait_gone(kc, resources.CONFIG_MAP, "doomed-outputs", namespace, timeout=90)
    await kc.delete(resources.NAMESPACE, namespace, missing_ok=True)
