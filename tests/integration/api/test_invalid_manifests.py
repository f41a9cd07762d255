"""Manifests the Go operator's CRDs refuse are refused here too, with the API server's own message."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crd_testlib import create
from lightkube import ApiError, Client

STACK: dict[str, Any] = {
    "apiVersion": "pulumi.com/v1",
    "kind": "Stack",
    "metadata": {"name": "invalid"},
    "spec": {"stack": "acme/app/dev", "projectRepo": "https://github.com/acme/app", "branch": "main"},
}
WORKSPACE: dict[str, Any] = {
    "apiVersion": "auto.pulumi.com/v1alpha1",
    "kind": "Workspace",
    "metadata": {"name": "invalid"},
    "spec": {"local": {"dir": "/share/program"}, "stacks": [{"name": "dev"}]},
}
PROGRAM: dict[str, Any] = {
    "apiVersion": "pulumi.com/v1",
    "kind": "Program",
    "metadata": {"name": "invalid"},
    "program": {"resources": {"bucket": {"properties": {"bucketPrefix": "site-"}}}},
}
NAME_43 = "a" * 43
# A schema error stops the root CEL rule (the Stack name rule) from running; the server says so.
CEL_SKIPPED = ("<nil>: Invalid value: null: some validation rules were not checked because the object was "
               "invalid; correct the existing errors to complete validation")


def _with(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(base)
    *parents, leaf = path.split(".")
    node = manifest
    for key in parents:
        node = node[key]
    if value is _DELETE:
        del node[leaf]
    else:
        node[leaf] = value
    return manifest


_DELETE = object()

CASES = [
    pytest.param(_with(STACK, "spec.stack", _DELETE),
                 'Stack.pulumi.com "invalid" is invalid: [spec.stack: Required value, ' + CEL_SKIPPED + "]",
                 id="stack-without-spec.stack"),
    pytest.param(_with(STACK, "metadata.name", NAME_43),
                 f'Stack.pulumi.com "{NAME_43}" is invalid: <nil>: Invalid value: "object": '
                 "Stack name must be no more than 42 characters in length.", id="stack-name-43-characters"),
    pytest.param(_with(STACK, "spec.workspaceReclaimPolicy", "Sometimes"),
                 'Stack.pulumi.com "invalid" is invalid: [spec.workspaceReclaimPolicy: Unsupported value: '
                 '"Sometimes": supported values: "Retain", "Delete", ' + CEL_SKIPPED + "]",
                 id="stack-reclaim-policy-sometimes"),
    pytest.param(PROGRAM,
                 'Program.pulumi.com "invalid" is invalid: program.resources.bucket.type: Required value',
                 id="program-resource-without-type"),
]


@pytest.mark.parametrize(("manifest", "message"), CASES)
def test_refused_with_the_api_server_message(client: Client, namespace: str, manifest: dict[str, Any],
                                             message: str) -> None:
    with pytest.raises(ApiError) as refused:
        create(client, manifest, namespace)
    assert refused.value.status.code == 422
    assert refused.value.status.reason == "Invalid"
    assert refused.value.status.message == message


def test_any_security_profile_is_accepted_as_by_the_go_operator(client: Client, namespace: str) -> None:
    """The Go CRD has no enum on securityProfile (its `+enum` marker is not a CRD enum), so neither has ours."""
    created = create(client, _with(WORKSPACE, "spec.securityProfile", "privileged"), namespace)
    assert created["spec"]["securityProfile"] == "privileged"


def test_a_42_character_stack_name_is_accepted(client: Client, namespace: str) -> None:
    manifest = _with(STACK, "metadata.name", "a" * 42)
    created = create(client, manifest, namespace)
    assert created["metadata"]["name"] == "a" * 42
