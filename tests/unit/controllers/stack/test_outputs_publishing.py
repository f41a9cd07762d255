"""`spec.outputs` as a pure plan: which outputs go into the Secret and the ConfigMap, how values and templates are
written, and the problems (named, never with values) that stop publishing."""

from __future__ import annotations

import base64
import datetime
from typing import Any

import pytest

from pko.api import stack as stack_api
from pko.controllers.stack import outputs

OUTPUTS: dict[str, Any] = {
    "url": "https://db.example:5432",
    "port": 5432,
    "enabled": True,
    "db": {"host": "db.example", "replicas": ["a", "b"]},
    "password": "hunter2",
}
SECRETS = ["password"]
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def _spec(**fields: Any) -> stack_api.StackOutputs:
    return stack_api.StackOutputs.model_validate(fields)


def _stack() -> stack_api.Stack:
    return stack_api.Stack.model_validate({
        "metadata": {"name": "app", "namespace": "team", "uid": "uid-1"},
        "spec": {"stack": "dev", "outputs": {"secretName": "app-outputs"}},
    })


def test_all_outputs_when_keys_is_left_out_strings_as_is_others_as_json() -> None:
    result = outputs.plan(_spec(secretName="s", configMapName="c"), OUTPUTS, SECRETS)
    assert result.ok
    assert result.secret == {"url": "https://db.example:5432", "port": "5432", "enabled": "true",
                             "db": '{"host":"db.example","replicas":["a","b"]}', "password": "hunter2"}
    # The ConfigMap never gets a secret output.
    assert result.config_map == {k: v for k, v in result.secret.items() if k != "password"}
    assert result.withheld == ()


def test_keys_select_and_an_empty_list_selects_none() -> None:
    result = outputs.plan(_spec(secretName="s", keys=["url", "password"]), OUTPUTS, SECRETS)
    assert result.secret == {"url": "https://db.example:5432", "password": "hunter2"}
    assert result.config_map is None
    result = outputs.plan(_spec(configMapName="c", keys=[], template={"host": "{{ .outputs.db.host }}"}),
                          OUTPUTS, SECRETS)
    assert result.config_map == {"host": "db.example"}


def test_a_configmap_alone_leaves_secret_outputs_out_and_names_them() -> None:
    result = outputs.plan(_spec(configMapName="c"), OUTPUTS, SECRETS)
    assert result.ok
    assert result.secret is None
    assert "password" not in (result.config_map or {})
    assert result.withheld == ("password",)
    message = outputs.published_message(_spec(configMapName="c"), result)
    assert "password" in message
    assert "hunter2" not in message
    assert message.startswith("published to ConfigMap c (keys: db, enabled, port, url)")


def test_templates_interpolate_paths_and_carry_secretness() -> None:
    spec = _spec(secretName="s", configMapName="c", keys=[], template={
        "dsn": "postgres://app:{{ .outputs.password }}@{{.outputs.db.host}}:{{ .outputs.port }}/app",
        "first": "{{ .outputs.db.replicas.0 }}",
        "whole": "{{ .outputs.db }}",
        "plain": "no references at all }}",
    })
    result = outputs.plan(spec, OUTPUTS, SECRETS)
    assert result.ok
    assert result.secret == {"dsn": "postgres://app:hunter2@db.example:5432/app", "first": "a",
                             "whole": '{"host":"db.example","replicas":["a","b"]}', "plain": "no references at all }}"}
    assert result.config_map == {"first": "a", "whole": result.secret["whole"], "plain": "no references at all }}"}


def test_a_template_entry_replaces_an_output_of_the_same_name() -> None:
    result = outputs.plan(_spec(secretName="s", keys=["url"], template={"url": "{{ .outputs.db.host }}"}),
                          OUTPUTS, SECRETS)
    assert result.secret == {"url": "db.example"}


@pytest.mark.parametrize(("spec", "named"), [
    pytest.param(_spec(secretName="s", keys=["url", "endpoint"]),
                 "output 'endpoint' (spec.outputs.keys) does not exist", id="missing-key"),
    pytest.param(_spec(secretName="s", template={"x": "{{ .outputs.endpoint }}"}),
                 "output 'endpoint' (spec.outputs.template.x) does not exist", id="missing-reference"),
    pytest.param(_spec(secretName="s", template={"x": "{{ .outputs.db.port }}"}),
                 "output 'db.port' (spec.outputs.template.x) does not exist", id="missing-field"),
    pytest.param(_spec(secretName="s", template={"x": "{{ .outputs.db.replicas.7 }}"}),
                 "output 'db.replicas.7' (spec.outputs.template.x) does not exist", id="index-out-of-range"),
])
def test_a_missing_output_stops_publishing_and_is_named(spec: stack_api.StackOutputs, named: str) -> None:
    result = outputs.plan(spec, OUTPUTS, SECRETS)
    assert not result.ok
    assert result.reason == outputs.REASON_OUTPUT_MISSING
    assert result.secret is None
    assert result.config_map is None
    assert named in result.problems
    assert result.problems[-1] == "the stack's outputs are: db, enabled, password, port, url"
    assert not any("hunter2" in p for p in result.problems)


@pytest.mark.parametrize("template", [
    "{{ .Values.x }}", "{{ printf \"%s\" .outputs.url }}", "{{ .outputs.url | upper }}", "{{ .outputs }}",
    "prefix {{ .outputs.url", "{{ exec \"rm -rf /\" }}",
])
def test_anything_but_a_reference_is_refused(template: str) -> None:
    result = outputs.plan(_spec(secretName="s", template={"x": template}), OUTPUTS, SECRETS)
    assert not result.ok
    assert result.reason == outputs.REASON_TEMPLATE_INVALID
    assert result.problems[0].startswith("spec.outputs.template.x: ")


def test_desired_objects_are_controlled_by_the_stack() -> None:
    secret = outputs.desired(outputs.resources.SECRET, "app-outputs", {"url": "u", "password": "p"}, _stack(), "up-1")
    assert secret["type"] == "Opaque"
    assert {k: base64.b64decode(v).decode() for k, v in secret["data"].items()} == {"url": "u", "password": "p"}
    ref = secret["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == ("Stack", "app", "uid-1", True)
    assert secret["metadata"]["annotations"] == {outputs.ANNOTATION_UPDATE: "up-1"}
    config_map = outputs.desired(outputs.resources.CONFIG_MAP, "app", {"url": "u"}, _stack(), "up-1")
    assert config_map["data"] == {"url": "u"}
    assert "type" not in config_map
    assert not outputs.foreign(secret, _stack())


def test_an_object_the_stack_does_not_control_is_foreign() -> None:
    stranger: dict[str, Any] = {"metadata": {"name": "app-outputs"}}
    assert outputs.foreign(stranger, _stack())
    other_stack = {"metadata": {"ownerReferences": [{"apiVersion": "pulumi.com/v1", "kind": "Stack", "name": "app",
                                                     "uid": "uid-of-an-earlier-app", "controller": True}]}}
    assert outputs.foreign(other_stack, _stack())
    merely_owned = {"metadata": {"ownerReferences": [{"apiVersion": "pulumi.com/v1", "kind": "Stack", "name": "app",
                                                      "uid": "uid-1"}]}}
    assert outputs.foreign(merely_owned, _stack())


def test_a_replacement_keeps_foreign_metadata_and_replaces_the_data() -> None:
    existing = {"metadata": {"name": "c", "resourceVersion": "7", "labels": {"team": "a"},
                             "annotations": {"note": "kept"}}, "data": {"old": "gone"}}
    want = outputs.desired(outputs.resources.CONFIG_MAP, "c", {"new": "x"}, _stack(), "up-2")
    replaced = outputs.replacement(existing, want)
    assert replaced["data"] == {"new": "x"}
    assert replaced["metadata"]["resourceVersion"] == "7"
    assert replaced["metadata"]["labels"]["team"] == "a"
    assert replaced["metadata"]["annotations"] == {"note": "kept", outputs.ANNOTATION_UPDATE: "up-2"}


def test_the_condition_is_set_and_cleared() -> None:
    marked = outputs.mark(None, False, outputs.REASON_NAME_CONFLICT, "Secret s exists", now=NOW)
    assert [(c.type, c.status, c.reason) for c in marked] == [("OutputsPublished", "False", "NameConflict")]
    assert outputs.clear(marked) == []
