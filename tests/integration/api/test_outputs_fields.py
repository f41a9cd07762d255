"""pko's `spec.outputs` on the real API server: a target is required, names must be Secret/ConfigMap names, keys
and template keys must be data keys; meaningless values are refused with the server's own message (so
`kubectl apply` says what is wrong), meaningful ones are stored as written in both served versions."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crd_testlib import create
from lightkube import ApiError, Client

from pko.api import stack as stack_api

STACK: dict[str, Any] = {
    "apiVersion": "pulumi.com/v1",
    "kind": "Stack",
    "metadata": {"name": "published"},
    "spec": {"stack": "acme/app/dev", "projectRepo": "https://github.com/acme/app", "branch": "main"},
}
INVALID = 'Stack.pulumi.com "published" is invalid: '
NAME = f"'{stack_api.OBJECT_NAME_PATTERN}'"
NO_TARGET = INVALID + 'spec.outputs: Invalid value: "object": spec.outputs needs secretName or configMapName (or both)'
CEL_SKIPPED = ("<nil>: Invalid value: null: some validation rules were not checked because the object was "
               "invalid; correct the existing errors to complete validation")


def _with(outputs: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(STACK)
    manifest["spec"]["outputs"] = outputs
    return manifest


@pytest.mark.parametrize(("outputs", "message"), [
    pytest.param({}, NO_TARGET, id="no-target"),
    pytest.param({"keys": ["url"]}, NO_TARGET, id="keys-but-no-target"),
    pytest.param({"secretName": "App_Outputs"},
                 INVALID + 'spec.outputs.secretName: Invalid value: "App_Outputs": spec.outputs.secretName in body '
                 'should match ' + NAME, id="secret-name-invalid"),
    pytest.param({"configMapName": "-app"},
                 INVALID + 'spec.outputs.configMapName: Invalid value: "-app": spec.outputs.configMapName in body '
                 'should match ' + NAME, id="configmap-name-invalid"),
    pytest.param({"secretName": "a" * 254},
                 INVALID + "[spec.outputs.secretName: Too long: may not be more than 253 bytes, " + CEL_SKIPPED + "]",
                 id="secret-name-too-long"),
    pytest.param({"secretName": "app", "keys": ["has space"]},
                 INVALID + 'spec.outputs.keys[0]: Invalid value: "has space": spec.outputs.keys[0] in body should '
                 "match '^[-._a-zA-Z0-9]+$'", id="key-invalid"),
    pytest.param({"secretName": "app", "keys": ["url", "url"]},
                 INVALID + 'spec.outputs.keys[1]: Duplicate value: "url"', id="key-twice"),
    pytest.param({"secretName": "app", "template": {"a/b": "{{ .outputs.url }}"}},
                 INVALID + 'spec.outputs.template: Invalid value: "object": spec.outputs.template keys must be '
                 "Secret/ConfigMap data keys: letters, digits, '-', '_' and '.', at most 253 characters",
                 id="template-key-invalid"),
])
def test_meaningless_outputs_are_refused(client: Client, namespace: str, outputs: Any, message: str) -> None:
    with pytest.raises(ApiError) as refused:
        create(client, _with(outputs), namespace)
    assert refused.value.status.code == 422
    assert refused.value.status.message == message


@pytest.mark.parametrize("api_version", ["pulumi.com/v1", "pulumi.com/v1alpha1"])
def test_meaningful_outputs_are_stored_as_written(client: Client, namespace: str, api_version: str) -> None:
    outputs = {"secretName": "app-outputs", "configMapName": "app.outputs", "keys": ["url", "db_port"],
               "template": {"dsn": "postgres://{{ .outputs.host }}:{{ .outputs.db_port }}/app"}}
    manifest = _with(outputs)
    manifest["apiVersion"] = api_version
    manifest["metadata"]["name"] = f"stored-{api_version.rpartition('/')[2]}"
    stored = create(client, manifest, namespace)
    assert stored["spec"]["outputs"] == outputs
    only_config_map = _with({"configMapName": "app", "keys": []})
    only_config_map["metadata"]["name"] = f"cm-{api_version.rpartition('/')[2]}"
    assert create(client, only_config_map, namespace)["spec"]["outputs"] == {"configMapName": "app", "keys": []}
