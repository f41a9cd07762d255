"""pko's Stack additions (`spec.suspend`, `spec.retryPolicy`) on the real API server: meaningless values are refused
with the server's own message (so `kubectl apply` tells the user what is wrong), meaningful ones are stored as
written, in both served versions, and a Stack without them stores nothing new."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crd_testlib import create
from lightkube import ApiError, Client

STACK: dict[str, Any] = {
    "apiVersion": "pulumi.com/v1",
    "kind": "Stack",
    "metadata": {"name": "policy"},
    "spec": {"stack": "acme/app/dev", "projectRepo": "https://github.com/acme/app", "branch": "main"},
}
# A type error stops the root CEL rule (the Stack name rule) from running; the server says so.
CEL_SKIPPED = ("<nil>: Invalid value: null: some validation rules were not checked because the object was "
               "invalid; correct the existing errors to complete validation")


def _with(**spec: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(STACK)
    manifest["spec"].update(spec)
    return manifest


def _below(field: str, value: int, minimum: int) -> str:
    return (f'Stack.pulumi.com "policy" is invalid: spec.retryPolicy.{field}: Invalid value: {value}: '
            f"spec.retryPolicy.{field} in body should be greater than or equal to {minimum}")


@pytest.mark.parametrize(("manifest", "message"), [
    pytest.param(_with(retryPolicy={"maxFailures": -1}), _below("maxFailures", -1, 0), id="max-failures-negative"),
    pytest.param(_with(retryPolicy={"backoffBaseSeconds": 0}), _below("backoffBaseSeconds", 0, 1),
                 id="backoff-base-zero"),
    pytest.param(_with(retryPolicy={"backoffFactor": 0}), _below("backoffFactor", 0, 1), id="backoff-factor-zero"),
    pytest.param(_with(retryPolicy={"stalledRetryIntervalSeconds": -60}),
                 _below("stalledRetryIntervalSeconds", -60, 0), id="stalled-retry-negative"),
    pytest.param(_with(retryPolicy={"backoffFactor": 1.5}),
                 'Stack.pulumi.com "policy" is invalid: [spec.retryPolicy.backoffFactor: Invalid value: "number": '
                 'spec.retryPolicy.backoffFactor in body must be of type integer: "number", ' + CEL_SKIPPED + "]",
                 id="backoff-factor-fraction"),
    pytest.param(_with(suspend="yes"),
                 'Stack.pulumi.com "policy" is invalid: [spec.suspend: Invalid value: "string": spec.suspend in '
                 'body must be of type boolean: "string", ' + CEL_SKIPPED + "]", id="suspend-not-a-boolean"),
])
def test_meaningless_values_are_refused(client: Client, namespace: str, manifest: dict[str, Any],
                                        message: str) -> None:
    with pytest.raises(ApiError) as refused:
        create(client, manifest, namespace)
    assert refused.value.status.code == 422
    assert refused.value.status.message == message


@pytest.mark.parametrize("api_version", ["pulumi.com/v1", "pulumi.com/v1alpha1"])
def test_meaningful_values_are_stored_as_written(client: Client, namespace: str, api_version: str) -> None:
    policy = {"maxFailures": 0, "backoffBaseSeconds": 1, "backoffFactor": 1, "stalledRetryIntervalSeconds": 0}
    manifest = _with(suspend=True, retryPolicy=policy)
    manifest["apiVersion"] = api_version
    manifest["metadata"]["name"] = f"stored-{api_version.rpartition('/')[2]}"
    stored = create(client, manifest, namespace)
    assert stored["spec"]["suspend"] is True
    assert stored["spec"]["retryPolicy"] == policy


def test_a_stack_without_them_gets_no_defaults(client: Client, namespace: str) -> None:
    manifest = copy.deepcopy(STACK)
    manifest["metadata"]["name"] = "plain"
    stored = create(client, manifest, namespace)
    assert stored["spec"] == STACK["spec"]
