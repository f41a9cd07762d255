"""An event or an owner reference made from a typed model is the one made from its JSON: they read only what names
the object (``objects.identity``), never the rest of the model."""

from __future__ import annotations

import datetime
import itertools
from typing import Any

import pytest

from pko.api import program as program_api
from pko.api import stack as stack_api
from pko.api import update as update_api
from pko.api import workspace as workspace_api
from pko.api.meta import Wire
from pko.kube import events, objects, owners

NOW = datetime.datetime(2026, 12, 6, 8, 0, tzinfo=datetime.UTC)


def _models() -> list[Wire]:
    made: list[Wire] = []
    for (model, spec), namespace, uid, version in itertools.product(
            ((stack_api.Stack, {"stack": "dev", "projectRepo": "https://example.test/r.git", "branch": "main"}),
             (workspace_api.Workspace, {"stacks": [{"name": "dev"}]}),
             (update_api.Update, {"stackName": "dev", "workspaceName": "w", "type": "up"}),
             (program_api.Program, {"program": {"outputs": {"a": "b"}}})),
            ("team", None), ("u-1", None), ("42", None)):
        meta: dict[str, Any] = {"name": "web", "labels": {"a": "b"}, "generation": 3}
        meta |= {k: v for k, v in (("namespace", namespace), ("uid", uid), ("resourceVersion", version)) if v}
        made.append(model.model_validate({"metadata": meta, "spec": spec,
                                          "status": {"observedGeneration": 2}}))
    return made


@pytest.mark.parametrize("model", _models(), ids=lambda m: f"{type(m).__name__}")
def test_an_event_on_a_model_is_the_event_on_its_json(model: Wire) -> None:
    wire = model.to_wire()
    made, expected = (events.event_for(o, "Normal", "Reason", "said", "stack-controller", NOW) for o in (model, wire))
    for event in (made, expected):
        assert event["metadata"]["name"].startswith("web.")
        event["metadata"]["name"] = "web.x"
    assert made == expected
    assert made["involvedObject"]["kind"] == wire["kind"]


@pytest.mark.parametrize("model", _models(), ids=lambda m: f"{type(m).__name__}")
def test_an_owner_reference_to_a_model_is_the_one_to_its_json(model: Wire) -> None:
    wire = model.to_wire()
    if not objects.uid_of(wire):
        with pytest.raises(ValueError, match="uid"):
            owners.controller_reference(model)
        return
    assert owners.controller_reference(model) == owners.controller_reference(wire)


def test_identity_keeps_only_what_names_the_object() -> None:
    model = _models()[0]
    assert objects.identity(model) == {
        "apiVersion": stack_api.API_VERSION, "kind": stack_api.KIND,
        "metadata": {"name": "web", "namespace": "team", "uid": "u-1", "resourceVersion": "42"}}
    as_json = model.to_wire()
    assert objects.identity(as_json) is as_json
