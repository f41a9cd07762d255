"""pko's `spec.ttl` on the real API server: a TTL that is not a positive Go duration is refused with the server's
message naming the field (so `kubectl apply` tells the user), a good one is stored as written in both served
versions."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crd_testlib import create
from lightkube import ApiError, Client

from pko.api import durations
from pko.api import stack as stack_api

STACK: dict[str, Any] = {
    "apiVersion": "pulumi.com/v1",
    "kind": "Stack",
    "metadata": {"name": "review"},
    "spec": {"stack": "acme/app/review", "projectRepo": "https://github.com/acme/app", "branch": "main"},
}
REFUSED = f'Stack.pulumi.com "review" is invalid: spec.ttl: Invalid value: "string": {stack_api.TTL_MESSAGE}'


def _with(ttl: str, name: str = "review", api_version: str = "pulumi.com/v1") -> dict[str, Any]:
    manifest = copy.deepcopy(STACK)
    manifest["apiVersion"] = api_version
    manifest["metadata"]["name"] = name
    manifest["spec"]["ttl"] = ttl
    return manifest


@pytest.mark.parametrize("value", ["0s", "0", "00m", "30", "-1h", "1 day", "3d", "soon", ""])
def test_a_ttl_that_is_not_a_positive_duration_is_refused(client: Client, namespace: str, value: str) -> None:
    with pytest.raises(ApiError) as refused:
        create(client, _with(value), namespace)
    assert refused.value.status.code == 422
    assert refused.value.status.message == REFUSED


@pytest.mark.parametrize("api_version", ["pulumi.com/v1", "pulumi.com/v1alpha1"])
@pytest.mark.parametrize("value", ["30s", "72h", "1h30m", "1.5h", "500ms"])
def test_a_good_ttl_is_stored_as_written(client: Client, namespace: str, api_version: str, value: str) -> None:
    name = f"ttl-{api_version.rpartition('/')[2]}-{value.replace('.', '-')}"
    stored = create(client, _with(value, name, api_version), namespace)
    assert stored["spec"]["ttl"] == value
    assert durations.parse(value) > 0  # what the operator reads it as
