"""pko's StackRollout on the real API server: a rollout without a revision, with a wave that is neither (or both) a
selector and a percentage, with a gate that is not exactly one kind, or with a malformed duration is refused with a
message that says what is wrong; a good one is stored as written; after creation only `paused` and `abort` change
(that is how `kubectl pko rollout` steers it), anything else is refused."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crd_testlib import create, resource_for
from lightkube import ApiError, Client
from lightkube.types import PatchType

from pko.api import rollout

ROLLOUT: dict[str, Any] = {
    "apiVersion": "pulumi.com/v1alpha1",
    "kind": "StackRollout",
    "metadata": {"name": "app-v2"},
    "spec": {
        "selector": {"matchLabels": {"app": "shop"}},
        "revision": {"commit": "0123456789abcdef0123456789abcdef01234567", "config": {"version": "v2"}},
        "waves": [
            {"name": "dev", "selector": {"matchLabels": {"env": "dev"}}, "bake": "30s"},
            {"name": "rest", "percent": 100, "maxConcurrent": 5},
        ],
        "gates": [
            {"name": "errors", "prometheus": {"address": "http://prometheus:9090",
                                              "query": "sum(rate(http_errors_total[1m]))", "max": 0.5},
             "interval": "20s", "failureLimit": 2},
            {"name": "site", "http": {"url": "https://shop.example/healthz", "expectStatus": [200]}},
            {"name": "version", "outputs": {"output": "version", "equals": "v2"}},
        ],
        "maxFailureRate": 20,
    },
}


def _with(change: dict[str, Any], name: str) -> dict[str, Any]:
    manifest = copy.deepcopy(ROLLOUT)
    manifest["metadata"]["name"] = name
    for path, value in change.items():
        node = manifest["spec"]
        *parents, leaf = path.split(".")
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if value is None:
            del node[leaf]
        else:
            node[leaf] = value
    return manifest


REFUSALS = [
    ({"revision": {}}, rollout.REVISION_MESSAGE),
    ({"revision": {"commit": "0123456", "branch": "main"}}, rollout.REVISION_GIT_MESSAGE),
    ({"revision.commit": "main"}, "spec.revision.commit in body should match"),
    ({"waves": []}, "a rollout needs at least one wave"),
    ({"waves": [{"name": "all"}]}, rollout.WAVE_MESSAGE),
    ({"waves": [{"percent": 50, "selector": {"matchLabels": {"a": "b"}}}]}, rollout.WAVE_MESSAGE),
    ({"waves": [{"percent": 0}]}, "should be greater than or equal to 1"),
    ({"waves": [{"percent": 101}]}, "should be less than or equal to 100"),
    ({"waves": [{"percent": 10, "bake": "3d"}]}, "bake must be a duration such as 10m or 90s"),
    ({"gates": [{"name": "none"}]}, rollout.GATE_MESSAGE),
    ({"gates": [{"name": "two", "http": {"url": "http://a"}, "outputs": {"output": "x"}}]}, rollout.GATE_MESSAGE),
    ({"gates": [{"name": "Bad_Name", "http": {"url": "http://a"}}]}, "spec.gates[0].name in body should match"),
    ({"gates": [{"name": "p", "prometheus": {"address": "prometheus:9090", "query": "up"}}]},
     "spec.gates[0].prometheus.address in body should match"),
    ({"gates": [{"name": "fast", "http": {"url": "http://a"}, "interval": "500ms"}]}, "interval must be at least 1s"),
    ({"gates": [{"name": "o", "outputs": {"output": "x"}, "headersSecretRef": {"name": "s"}}]},
     "headersSecretRef is for prometheus and http gates"),
    ({"maxFailureRate": 150}, "should be less than or equal to 100"),
    ({"selector": None}, "spec.selector: Required value"),
]


@pytest.mark.parametrize(("change", "message"), REFUSALS, ids=[str(i) for i in range(len(REFUSALS))])
def test_a_malformed_rollout_is_refused_with_a_message(client: Client, namespace: str, change: dict[str, Any],
                                                       message: str) -> None:
    with pytest.raises(ApiError) as refused:
        create(client, _with(change, "bad"), namespace)
    assert refused.value.status.code == 422
    assert message in (refused.value.status.message or "")


def test_a_good_rollout_is_stored_as_written_and_only_paused_and_abort_change(client: Client,
                                                                              namespace: str) -> None:
    stored = create(client, _with({}, "good"), namespace)
    assert stored["spec"] == ROLLOUT["spec"]
    resource = resource_for(ROLLOUT)
    for allowed in ({"paused": True}, {"abort": True}):
        patched = client.patch(resource, "good", {"spec": allowed}, namespace=namespace,
                               patch_type=PatchType.MERGE)
        assert {k: patched["spec"][k] for k in allowed} == allowed
    for refused_change in ({"revision": {"commit": "fedcba9"}}, {"waves": [{"percent": 100}]},
                           {"gates": None}, {"maxFailureRate": 50}):
        with pytest.raises(ApiError) as refused:
            client.patch(resource, "good", {"spec": refused_change}, namespace=namespace,
                         patch_type=PatchType.MERGE)
        assert refused.value.status.code == 422
        assert rollout.IMMUTABLE_MESSAGE in (refused.value.status.message or "")
