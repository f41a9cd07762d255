"""pko's `spec.outputRefs` on the real API server: a reference without its Stack or output, or naming a Stack in
another namespace, is refused with the server's message (references never leave the namespace); a good one is
stored as written."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crd_testlib import create
from lightkube import ApiError, Client

STACK: dict[str, Any] = {
    "apiVersion": "pulumi.com/v1",
    "kind": "Stack",
    "metadata": {"name": "app"},
    "spec": {"stack": "acme/app/dev", "projectRepo": "https://github.com/acme/app", "branch": "main"},
}
PREFIX = 'Stack.pulumi.com "app" is invalid: '


def _with(refs: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(STACK)
    manifest["spec"]["outputRefs"] = refs
    return manifest


@pytest.mark.parametrize(("refs", "message"), [
    pytest.param({"vpcId": {"output": "vpcId"}}, 'spec.outputRefs.vpcId.stackName: Required value',
                 id="no-stack"),
    pytest.param({"vpcId": {"stackName": "network"}}, 'spec.outputRefs.vpcId.output: Required value',
                 id="no-output"),
    pytest.param({"vpcId": {"stackName": "infra/network", "output": "vpcId"}},
                 'spec.outputRefs.vpcId.stackName: Invalid value: "infra/network": spec.outputRefs.vpcId.stackName '
                 'in body should match', id="other-namespace"),
])
def test_a_reference_that_cannot_be_followed_is_refused(client: Client, namespace: str, refs: Any,
                                                         message: str) -> None:
    with pytest.raises(ApiError) as refused:
        create(client, _with(refs), namespace)
    assert refused.value.status.code == 422
    assert refused.value.status.message.startswith(PREFIX)
    assert message in refused.value.status.message


def test_a_good_reference_is_stored_as_written(client: Client, namespace: str) -> None:
    refs = {"vpcId": {"stackName": "network", "output": "vpcId"},
            "app:dbPassword": {"stackName": "database.v2", "output": "password", "secret": True}}
    stored = create(client, _with(refs), namespace)
    assert stored["spec"]["outputRefs"] == refs
