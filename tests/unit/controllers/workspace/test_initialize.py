"""The pure parts of workspace initialisation: the CLI version gate for structured config (pko-v2 §3.2 step 5) and
the agent `ConfigItem`s a Workspace's stack config becomes (version parsing itself: tests/unit/api/test_versions.py)."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2

from pko.api import workspace as ws_api
from pko.controllers.workspace import initialize
from pko.protocol.proto import agent_pb2


def _stacks(*configs: list[dict[str, Any]]) -> list[ws_api.WorkspaceStack]:
    return [ws_api.WorkspaceStack.model_validate({"name": f"s{i}", "config": config})
            for i, config in enumerate(configs)]


def _items(config: list[dict[str, Any]]) -> list[ws_api.ConfigItem]:
    return [ws_api.ConfigItem.model_validate(item) for item in config]


# --- uses_json_config --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("config", [
    [{"key": "n", "value": 3}],
    [{"key": "f", "value": 1.5}],
    [{"key": "b", "value": False}],
    [{"key": "o", "value": {"a": 1}}],
    [{"key": "l", "value": ["x"]}],
    [{"key": "plain", "value": "x"}, {"key": "j", "valueFrom": {"env": "J", "json": True}}],
    [{"key": "j", "valueFrom": {"path": "/etc/j.json", "json": True}}],
])
def test_structured_values_use_json_config(config: list[dict[str, Any]]) -> None:
    assert initialize.uses_json_config(_stacks([], config))


@pytest.mark.parametrize("config", [
    [],
    [{"key": "s", "value": "text"}],
    [{"key": "s", "value": "{\"looks\": \"like json\"}"}],
    [{"key": "e", "valueFrom": {"env": "E"}}],
    [{"key": "e", "valueFrom": {"env": "E", "json": False}}],
    [{"key": "p", "valueFrom": {"path": "/x"}, "secret": True, "path": True}],
])
def test_plain_values_do_not(config: list[dict[str, Any]]) -> None:
    assert not initialize.uses_json_config(_stacks(config))


def test_no_stacks_do_not() -> None:
    assert not initialize.uses_json_config(None)
    assert not initialize.uses_json_config([])
    assert not initialize.uses_json_config([ws_api.WorkspaceStack(name="dev")])


# --- json_config_problem -----------------------------------------------------------------------------------------

STRUCTURED = _stacks([{"key": "replicas", "value": 3}])


def test_cli_before_3_202_is_refused_for_structured_config() -> None:
    assert initialize.json_config_problem(STRUCTURED, "3.201.0") == (
        "Pulumi CLI version 3.201.0 does not support JSON configuration, require >= v3.202.0"
    )
    assert initialize.json_config_problem(STRUCTURED, "v3.150.9") == (
        "Pulumi CLI version v3.150.9 does not support JSON configuration, require >= v3.202.0"
    )
    assert initialize.json_config_problem(STRUCTURED, "2.999.999") is not None
    # As Go's semver: a pre-release comes before its release, and a short version is padded.
    assert initialize.json_config_problem(STRUCTURED, "3.202.0-alpha.1712345678") is not None
    assert initialize.json_config_problem(STRUCTURED, "3.201") is not None


@pytest.mark.parametrize("version", [
    "3.202.0", "v3.202.0", "3.202.1", "3.259.0", "4.0.0", "3.202", " v3.203.0-dev.1\n",
])
def test_cli_from_3_202_is_fine(version: str) -> None:
    assert initialize.json_config_problem(STRUCTURED, version) is None


def test_unparseable_version_is_reported() -> None:
    assert initialize.json_config_problem(STRUCTURED, "dev-build") == 'Failed to parse Pulumi version "dev-build"'


@pytest.mark.parametrize("version", ["3.0.0", "dev-build", ""])
def test_plain_config_never_checks_the_version(version: str) -> None:
    assert initialize.json_config_problem(_stacks([{"key": "a", "value": "b"}]), version) is None
    assert initialize.json_config_problem(None, version) is None


# --- config_items ------------------------------------------------------------------------------------------------


def _value(item: agent_pb2.ConfigItem) -> Any:
    assert item.WhichOneof("v") == "value"
    return json_format.MessageToDict(item.value)


def test_literal_values_become_protobuf_values_of_their_type() -> None:
    items = initialize.config_items(_items([
        {"key": "s", "value": "text"},
        {"key": "n", "value": 3},
        {"key": "f", "value": 2.5},
        {"key": "b", "value": True},
        {"key": "o", "value": {"a": {"b": [1, "two", None]}}},
        {"key": "l", "value": [1, False]},
    ]))
    assert [i.key for i in items] == ["s", "n", "f", "b", "o", "l"]
    kinds = [i.value.WhichOneof("kind") for i in items]
    assert kinds == ["string_value", "number_value", "number_value", "bool_value", "struct_value", "list_value"]
    assert items[0].value == struct_pb2.Value(string_value="text")
    assert items[1].value.number_value == 3
    assert items[2].value.number_value == 2.5
    assert items[3].value.bool_value is True
    assert _value(items[4]) == {"a": {"b": [1, "two", None]}}
    assert _value(items[5]) == [1, False]


def test_flags_are_set_only_when_given() -> None:
    plain, flagged, off = initialize.config_items(_items([
        {"key": "plain", "value": "x"},
        {"key": "a.b", "value": "y", "path": True, "secret": True},
        {"key": "c", "value": "z", "path": False, "secret": False},
    ]))
    assert not plain.HasField("path")
    assert not plain.HasField("secret")
    assert flagged.HasField("path")
    assert flagged.path is True
    assert flagged.HasField("secret")
    assert flagged.secret is True
    assert off.HasField("path")
    assert off.path is False
    assert off.HasField("secret")
    assert off.secret is False


def test_value_from_env() -> None:
    (item,) = initialize.config_items(_items([{"key": "token", "valueFrom": {"env": "TOKEN"}, "secret": True}]))
    assert item.WhichOneof("v") == "value_from"
    assert item.value_from.WhichOneof("f") == "env"
    assert item.value_from.env == "TOKEN"
    assert not item.value_from.HasField("json")
    assert item.secret is True


def test_value_from_path_is_translated() -> None:
    seen: list[str] = []

    def translate(path: str) -> str:
        seen.append(path)
        return "/tmp/ws/mounts" + path

    (from_path, from_env) = initialize.config_items(_items([
        {"key": "cert", "valueFrom": {"path": "/etc/certs/tls.crt"}},
        {"key": "env", "valueFrom": {"env": "/not/a/path"}},
    ]), translate)
    assert from_path.value_from.WhichOneof("f") == "path"
    assert from_path.value_from.path == "/tmp/ws/mounts/etc/certs/tls.crt"
    assert from_env.value_from.env == "/not/a/path"
    assert seen == ["/etc/certs/tls.crt"]  # only paths are translated


def test_value_from_path_untranslated_by_default() -> None:
    (item,) = initialize.config_items(_items([{"key": "k", "valueFrom": {"path": "/etc/x"}}]))
    assert item.value_from.path == "/etc/x"


@pytest.mark.parametrize("flag", [True, False])
def test_value_from_json_flag(flag: bool) -> None:
    (item,) = initialize.config_items(_items([{"key": "k", "valueFrom": {"env": "J", "json": flag}}]))
    assert item.value_from.HasField("json")
    assert item.value_from.json is flag


def test_value_from_env_wins_over_path() -> None:
    (item,) = initialize.config_items(_items([{"key": "k", "valueFrom": {"env": "E", "path": "/p"}}]))
    assert item.value_from.WhichOneof("f") == "env"


def test_value_from_wins_over_a_literal_value() -> None:
    (item,) = initialize.config_items(_items([{"key": "k", "value": "v", "valueFrom": {"env": "E"}}]))
    assert item.WhichOneof("v") == "value_from"


def test_item_without_a_value_carries_only_its_key() -> None:
    (item,) = initialize.config_items(_items([{"key": "k"}]))
    assert item.WhichOneof("v") is None
    assert item == agent_pb2.ConfigItem(key="k")


def test_no_config_no_items() -> None:
    assert initialize.config_items(None) == []
    assert initialize.config_items([]) == []


@pytest.mark.parametrize(("spec", "install"), [
    ({"projectInfo": {"name": "p", "runtime": "nodejs"}}, False),  # PKO#1299: the source-free destroy workspace
    ({"projectInfo": {"name": "p", "runtime": "go"}, "local": {"dir": "/app"}}, True),  # a program is there
    ({"git": {"url": "https://example.com/r.git", "ref": "main"}}, True),
    ({"flux": {"url": "http://source/a.tar.gz", "digest": "sha256:" + "0" * 64}}, True),
    ({}, True),  # the image's own program
])
def test_only_a_program_is_installed_for(spec: dict[str, object], install: bool) -> None:
    assert initialize.needs_install(ws_api.WorkspaceSpec.model_validate(spec)) is install
