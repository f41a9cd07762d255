"""The kind registry: names resolve to kinds, objects to their kinds, and lightkube's registry stays untouched."""

from __future__ import annotations

import pytest
from lightkube.core.resource_registry import resource_registry

from pko import kube
from pko.kube import resources


def test_lookup_by_kind_group_and_api_version() -> None:
    assert kube.resource("Stack") is resources.STACK
    assert kube.resource("Stack.pulumi.com") is resources.STACK
    assert kube.resource("auto.pulumi.com/v1alpha1/Update") is resources.UPDATE
    assert kube.resource("Lease").group == "coordination.k8s.io"
    with pytest.raises(KeyError, match="unknown kind"):
        kube.resource("Nope")


def test_object_kind_follows_its_version() -> None:
    obj = {"apiVersion": "pulumi.com/v1alpha1", "kind": "Stack", "metadata": {"name": "x"}}
    kind = resources.of(obj)
    assert (kind.api_version, kind.plural) == ("pulumi.com/v1alpha1", "stacks")
    assert resources.STACK.matches(obj)


def test_new_object_of_a_kind() -> None:
    assert resources.CONFIG_MAP.new("c", "ns", data={"a": "b"}) == {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}, "data": {"a": "b"},
    }
    assert resources.NAMESPACE.new("ns", "ignored")["metadata"] == {"name": "ns"}


def test_models_decode_to_dicts_and_stay_out_of_lightkube_registry() -> None:
    model = resources.model(resources.CONFIG_MAP)
    assert issubclass(model, dict)
    assert model is resources.model(resources.CONFIG_MAP)
    assert resource_registry.get("v1", "ConfigMap") is not model
    assert resources.model(resources.STACK).Status._api_info.action == "status"
