"""Label selectors parsed and matched as the API server does (pko.kube.selectors): the operator refuses a bad
``--watch-label-selector`` at start-up, and filters Programs by the same selector the server applies to Stacks; a
StackRollout's ``matchLabels``/``matchExpressions`` selectors read as the same requirements."""

from __future__ import annotations

from typing import Any

import pytest

from pko.kube import selectors

SHARD = "sharding.fluxcd.io/key"


@pytest.mark.parametrize(("text", "labels", "expected"), [
    ("", {}, True),
    ("", {SHARD: "a"}, True),
    (f"!{SHARD}", {}, True),
    (f"!{SHARD}", {SHARD: "a"}, False),
    (f"{SHARD} in (a)", {SHARD: "a"}, True),
    (f"{SHARD} in (a, b)", {SHARD: "b"}, True),
    (f"{SHARD} in (a)", {SHARD: "b"}, False),
    (f"{SHARD} in (a)", {}, False),
    (f"{SHARD} notin (a)", {}, True),
    (f"{SHARD} notin (a)", {SHARD: "a"}, False),
    (f"{SHARD}=a", {SHARD: "a"}, True),
    (f"{SHARD}==a", {SHARD: "b"}, False),
    (f"{SHARD}!=a", {}, True),
    (f"{SHARD}!=a", {SHARD: "a"}, False),
    (SHARD, {SHARD: ""}, True),
    (SHARD, {}, False),
    ("env in (prod,staging),team=infra", {"env": "prod", "team": "infra"}, True),
    ("env in (prod,staging),team=infra", {"env": "prod", "team": "apps"}, False),
])
def test_a_selector_matches_what_the_api_server_would(text: str, labels: dict[str, str], expected: bool) -> None:
    assert selectors.parse(text).matches(labels) is expected


@pytest.mark.parametrize(("text", "says"), [
    ("env in (prod", "unbalanced"),
    ("env in prod)", "unbalanced"),
    ("env in ()", "at least one value"),
    ("env=a,,team=b", "empty requirement"),
    ("Bad Key=a", "not a requirement"),
    ("-env=a", "not a valid label key"),
    ("env=has space", "not a requirement"),
    (f"{SHARD}=-a", "not a valid label value"),
    (f"{SHARD} in (a,{'x' * 64})", "not a valid label value"),
])
def test_a_bad_selector_is_refused_with_the_reason(text: str, says: str) -> None:
    with pytest.raises(selectors.SelectorError, match=says):
        selectors.parse(text)


@pytest.mark.parametrize(("selector", "labels", "matched"), [
    ({}, {"a": "1"}, True),
    ({"matchLabels": {"env": "dev"}}, {"env": "dev", "x": "y"}, True),
    ({"matchLabels": {"env": "dev"}}, {"env": "prod"}, False),
    ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev", "qa"]}]}, {"env": "qa"}, True),
    ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]}, {}, True),
    ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]}, {"env": "prod"}, False),
    ({"matchExpressions": [{"key": "canary", "operator": "Exists"}]}, {"canary": ""}, True),
    ({"matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}]}, {"canary": ""}, False),
])
def test_a_label_selector_object_matches_as_the_api_server_does(selector: dict[str, Any], labels: dict[str, str],
                                                      matched: bool) -> None:
    assert selectors.of_label_selector(selector).matches(labels) is matched


def test_a_label_selector_object_with_an_unknown_operator_is_refused() -> None:
    with pytest.raises(selectors.SelectorError, match="not a valid label selector operator"):
        selectors.of_label_selector({"matchExpressions": [{"key": "a", "operator": "Gt"}]})
