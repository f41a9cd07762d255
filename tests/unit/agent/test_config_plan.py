"""SetAllConfig items become one `pulumi config set-all` call with the reference agent's rules and errors, or, when
they are plaintext under verbatim keys, wait for the next operation's `--config` flags."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from google.protobuf import struct_pb2

from pko.agent.config import plan_config
from pko.agent.errors import AgentError
from pko.agent.workspace import Workspace
from pko.protocol.proto import agent_pb2

ENV = {"TOKEN": "from-env", "JSON_ENV": '{"b": [1, 2]}'}
FILES = {"/secrets/pw": "from-file\n"}


def read_file(path: str) -> str:
    if path not in FILES:
        raise FileNotFoundError(path)
    return FILES[path]


def item(key: str, value: Any = None, *, path: bool | None = None, secret: bool | None = None,
         env: str | None = None, file: str | None = None, json_: bool | None = None) -> agent_pb2.ConfigItem:
    out = agent_pb2.ConfigItem(key=key)
    if path is not None:
        out.path = path
    if secret is not None:
        out.secret = secret
    if env is not None or file is not None:
        value_from = agent_pb2.ConfigValueFrom(env=env) if env is not None else agent_pb2.ConfigValueFrom(path=file)
        if json_ is not None:
            value_from.json = json_
        out.value_from.CopyFrom(value_from)
    else:
        v = struct_pb2.Value()
        if value is None:
            v.null_value = struct_pb2.NULL_VALUE
        elif isinstance(value, str):
            v.string_value = value
        else:
            v.CopyFrom(_value(value))
        out.value.CopyFrom(v)
    return out


def _value(value: Any) -> struct_pb2.Value:
    s = struct_pb2.Struct()
    s.update({"v": value})
    return s.fields["v"]


def plan(*items: agent_pb2.ConfigItem) -> Any:
    return plan_config("proj", list(items), ENV.get, read_file)


def test_plain_items_are_scoped_escaped_and_path_aware() -> None:
    result = plan(item("greeting", "hi"), item("aws:region", "eu"), item("tags.env", "dev", path=True),
                  item("token", "s3cr3t", secret=True), item('proj:["already"]', "x"))
    assert result.json_document is None
    assert result.set_all_args() == [[
        "config", "set-all", "--path",
        "--plaintext", 'proj:["greeting"]=hi',
        "--plaintext", 'aws:["region"]=eu',
        "--plaintext", "proj:tags.env=dev",
        "--secret", 'proj:["token"]=s3cr3t',
        "--plaintext", 'proj:["already"]=x',
    ]]


def test_value_from_env_and_file() -> None:
    result = plan(item("a", env="TOKEN"), item("b", file="/secrets/pw", secret=True))
    assert [(i.key, i.value, i.secret) for i in result.plain] == [
        ('proj:["a"]', "from-env", False), ('proj:["b"]', "from-file\n", True)]


def test_missing_env_is_invalid_argument_with_the_reference_message() -> None:
    with pytest.raises(AgentError) as failure:
        plan(item("a", env="NOPE"))
    assert failure.value.rpc.code == grpc.StatusCode.INVALID_ARGUMENT
    assert failure.value.rpc.message == ('config items: unmarshalling "a" config: rpc error: code = InvalidArgument '
                                         "desc = missing value for environment variable: NOPE")


def test_unreadable_file_is_invalid_argument() -> None:
    with pytest.raises(AgentError) as failure:
        plan(item("a", file="/no/such/file"))
    assert failure.value.rpc.code == grpc.StatusCode.INVALID_ARGUMENT
    assert failure.value.rpc.message.endswith("desc = unreadable path: /no/such/file")


def test_a_structured_value_switches_every_item_to_the_json_document() -> None:
    result = plan(item("obj", {"b": 1, "a": [True, 2.5, "x"]}), item("n", 3), item("s", "plain", secret=True),
                  item("j", env="JSON_ENV", json_=True), item("raw", env="TOKEN"))
    assert result.json_document == {
        "proj:obj": {"value": '{"a":[true,2.5,"x"],"b":1}', "objectValue": {"a": [True, 2.5, "x"], "b": 1},
                     "secret": False},
        "proj:n": {"value": "3", "objectValue": 3, "secret": False},
        "proj:s": {"value": "plain", "secret": True},
        "proj:j": {"value": '{"b": [1, 2]}', "objectValue": {"b": [1, 2]}, "secret": False},
        "proj:raw": {"value": "from-env", "secret": False},
    }
    (args,) = result.set_all_args()
    assert args[:3] == ["config", "set-all", "--json"]
    assert json.loads(args[3]) == result.json_document


def test_path_items_beside_json_values_are_set_as_paths_after_the_document() -> None:
    result = plan(item("obj", {"a": 1}), item("tags.env", "prod", path=True), item("name", "n"))
    assert result.json_document == {"proj:obj": {"value": '{"a":1}', "objectValue": {"a": 1}, "secret": False},
                                    "proj:name": {"value": "n", "secret": False}}
    calls = result.set_all_args()
    assert [c[:3] for c in calls] == [["config", "set-all", "--json"], ["config", "set-all", "--path"]]
    assert calls[1][3:] == ["--plaintext", "proj:tags.env=prod"]


def test_path_with_a_json_value_is_refused() -> None:
    with pytest.raises(AgentError) as failure:
        plan(item("obj", {"a": 1}, path=True))
    assert failure.value.rpc.code == grpc.StatusCode.INVALID_ARGUMENT
    assert failure.value.rpc.message == 'config item "obj": path=true is incompatible with JSON values'


def test_json_mode_missing_env_keeps_the_code() -> None:
    with pytest.raises(AgentError) as failure:
        plan(item("obj", {"a": 1}), item("b", env="NOPE"))
    assert failure.value.rpc.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "missing value for environment variable: NOPE" in failure.value.rpc.message


def test_bad_json_from_a_variable_is_an_error() -> None:
    with pytest.raises(AgentError) as failure:
        plan(item("j", env="TOKEN", json_=True))
    assert failure.value.rpc.code == grpc.StatusCode.UNKNOWN
    assert failure.value.rpc.message.startswith("parsing 'j' as JSON")


def test_keys_never_include_values() -> None:
    result = plan(item("token", "s3cr3t", secret=True))
    assert "s3cr3t" not in " ".join(result.keys())


def test_plaintext_under_verbatim_keys_can_wait_for_the_next_operation() -> None:
    plan = plan_config("proj", [item("greeting", "hi=there"), item("aws:region", "eu-west-1"), item("a.b", "-x"),
                                item("empty", "")], ENV.get, read_file)
    assert plan.deferred() == {"proj:greeting": "hi=there", "aws:region": "eu-west-1", "proj:a.b": "-x",
                               "proj:empty": ""}


@pytest.mark.parametrize("odd", [
    item("token", "s3cr3t", secret=True),  # encrypted by the CLI
    item("tags.env", "prod", path=True),  # merges into the stack file's value; --config would replace it
    item("replicas", 3),  # a JSON document
    item('["quoted"]', "v"),  # the key inside the brackets, which --config would take with them
    item("proj:a:b", "v"),  # --config refuses a second colon
])
def test_anything_else_is_set_at_once(odd: agent_pb2.ConfigItem) -> None:
    plan = plan_config("proj", [item("greeting", "hi"), odd], ENV.get, read_file)
    assert plan.deferred() is None
    assert plan.set_all_args()


def test_what_an_operation_carried_is_forgotten_once_it_succeeded_unless_it_changed_meanwhile() -> None:
    ws = Workspace(Path("."), cast(Any, None))
    ws.pending_config["dev"] = {"p:a": "1", "p:b": "2"}
    flags, sent = ws.config_flags("dev")
    assert flags == ["--config=p:a=1", "--config=p:b=2"]
    ws.pending_config["dev"]["p:b"] = "3"  # a SetAllConfig while the operation ran
    ws.config_saved("dev", sent)
    assert ws.pending_config == {"dev": {"p:b": "3"}}
    flags, sent = ws.config_flags("dev")  # a failed operation never calls config_saved: it is carried again
    assert ws.config_flags("dev")[0] == flags == ["--config=p:b=3"]
    ws.config_saved("dev", sent)
    assert ws.pending_config == {}
    assert ws.config_flags("dev") == ([], {})
