"""Turning ``SetAllConfig`` items into one ``pulumi config set-all`` invocation, as the reference agent does.

Rules (from the reference): an unqualified key belongs to the project (``<project>:<key>``). If any item holds a
structured value (a non-string ``Value``, or ``valueFrom`` with ``json: true``) the items go into one JSON
document for ``config set-all --json`` (``{key: {value, objectValue, secret}}``; a JSON value with ``path`` is
refused); otherwise items go to ``config set-all --path`` with each non-path key escaped as ``ns:["key"]`` so it is
taken verbatim. ``valueFrom`` reads the agent's own environment or a file, with the reference's error messages.

One deliberate difference: the reference also puts ``path`` items into the JSON document, where their keys are
taken literally (``tags.env`` becomes a key with a dot, not ``env`` inside ``tags``). Here, in JSON mode, ``path``
items are set by a second ``config set-all --path`` call after the JSON document, so they mean what they say.

Pure: the environment and file system are reached only through the callables passed in. It must never log or
return config values anywhere but in the CLI arguments it builds (they may be secrets).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import json_format

from pko.agent import gojson
from pko.agent.errors import AgentError
from pko.protocol.proto import agent_pb2

EnvLookup = Callable[[str], "str | None"]
FileReader = Callable[[str], str]


@dataclass(frozen=True)
class PlainItem:
    key: str
    value: str
    secret: bool
    literal: str | None = None
    """The qualified key as written (``ns:name``) when it is taken verbatim (not a path), else None."""


@dataclass(frozen=True)
class ConfigPlan:
    """What to hand to ``pulumi config set-all``: either a JSON document or plain path-aware items."""

    json_document: dict[str, dict[str, Any]] | None = None
    plain: list[PlainItem] = field(default_factory=list)

    def set_all_args(self) -> list[list[str]]:
        """The ``config set-all`` invocations, in order (without ``--stack``)."""
        calls = []
        if self.json_document is not None:
            calls.append(["config", "set-all", "--json", gojson.dumps(self.json_document)])
        if self.plain:
            args = ["config", "set-all", "--path"]
            for item in self.plain:
                args += ["--secret" if item.secret else "--plaintext", f"{item.key}={item.value}"]
            calls.append(args)
        return calls

    def deferred(self) -> dict[str, str] | None:
        """The plan as plain ``{ns:name: value}`` when the next operation can carry it instead of a ``config
        set-all`` of its own (``up``/``preview``/``refresh``/``destroy --config``): only plaintext strings under
        verbatim keys. Why: every CLI process costs some 0.2 CPU s before it does anything, and a workspace sets
        its config once at start, right before its first operation. Secrets need the CLI's encryption; JSON values
        need ``--json``; and a path key must merge into what the stack file holds, where ``--config`` replaces the
        whole top-level value: those keep their own ``config set-all``."""
        if self.json_document is not None:
            return None
        if any(item.secret or item.literal is None for item in self.plain):
            return None
        return {item.literal: item.value for item in self.plain if item.literal is not None}

    def keys(self) -> list[str]:
        """The qualified keys being set (safe to log)."""
        return sorted(self.json_document or {}) + [item.key for item in self.plain]


def parse_key(key: str, project: str) -> tuple[str, str]:
    """``(namespace, name)`` of a config key; an unqualified key is scoped to the project."""
    if ":" not in key:
        key = f"{project}:{key}"
    namespace, _, name = key.partition(":")
    if name.startswith("config:"):  # the legacy `<ns>:config:<name>` form
        name = name[len("config:"):]
    if not namespace or not name:
        raise AgentError(
            grpc.StatusCode.UNKNOWN,
            f"could not parse {key} as a configuration key "
            "(configuration keys should be of the form `<namespace>:<name>`)",
        )
    return namespace, name


def _escaped(name: str) -> str:
    if name.startswith('["') and name.endswith('"]'):
        return name
    return f"[{json.dumps(name, ensure_ascii=False)}]"


def _literal_safe(name: str) -> bool:
    """Whether ``--config ns:<name>=v`` (no path) sets the key `name` itself: the CLI refuses a second ``:``,
    splits at the first ``=``, and a name already in ``["..."]`` form means the key inside the brackets."""
    return ":" not in name and "=" not in name and not (name.startswith('["') and name.endswith('"]'))


def is_structured(item: agent_pb2.ConfigItem) -> bool:
    """Whether the item is a JSON value (any literal but a string or null, or ``valueFrom.json``)."""
    which = item.WhichOneof("v")
    if which == "value":
        kind = item.value.WhichOneof("kind")
        return kind not in ("string_value", "null_value", None)
    if which == "value_from":
        return item.value_from.json
    return False


def _resolve_from(value_from: agent_pb2.ConfigValueFrom, lookup_env: EnvLookup, read_file: FileReader) -> str:
    which = value_from.WhichOneof("f")
    if which == "env":
        data = lookup_env(value_from.env)
        if data is None:
            raise AgentError(grpc.StatusCode.INVALID_ARGUMENT,
                             f"missing value for environment variable: {value_from.env}")
        return data
    if which == "path":
        try:
            return read_file(value_from.path)
        except OSError:
            raise AgentError(grpc.StatusCode.INVALID_ARGUMENT, f"unreadable path: {value_from.path}") from None
    raise AgentError(grpc.StatusCode.INVALID_ARGUMENT, "invalid config value")


def _wrap(prefix: str, err: AgentError) -> AgentError:
    """A wrapped error keeps the inner code and reads like Go's ``fmt.Errorf("...: %w", statusErr)``."""
    code_name = "".join(part.capitalize() for part in err.rpc.code.name.split("_"))
    inner = f"rpc error: code = {code_name} desc = {err.rpc.message}"
    return AgentError(err.rpc.code, f"{prefix}: {inner}")


def _plain_value(item: agent_pb2.ConfigItem, lookup_env: EnvLookup, read_file: FileReader) -> str:
    which = item.WhichOneof("v")
    if which == "value":
        if item.value.WhichOneof("kind") == "string_value":
            return item.value.string_value
        return "<nil>"  # what the reference's fmt.Sprintf("%v", nil) produces for a null value
    if which == "value_from":
        return _resolve_from(item.value_from, lookup_env, read_file)
    raise AgentError(grpc.StatusCode.INVALID_ARGUMENT, "invalid config value")


def _json_entry(item: agent_pb2.ConfigItem, lookup_env: EnvLookup, read_file: FileReader) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    which = item.WhichOneof("v")
    if which == "value":
        if item.value.WhichOneof("kind") == "string_value":
            entry["value"] = item.value.string_value
        else:
            obj = json_format.MessageToDict(item.value)
            entry["value"] = gojson.dumps(obj)
            if obj is not None:
                entry["objectValue"] = gojson.normalize(obj)
    elif which == "value_from":
        data = _resolve_from(item.value_from, lookup_env, read_file)
        entry["value"] = data
        if item.value_from.json:
            try:
                obj = json.loads(data)
            except ValueError as err:
                raise AgentError(grpc.StatusCode.UNKNOWN, f"parsing {item.key!r} as JSON: {err}") from None
            if obj is not None:
                entry["objectValue"] = obj
    else:
        raise AgentError(grpc.StatusCode.INVALID_ARGUMENT, "invalid config value")
    entry["secret"] = item.secret
    return entry


def plan_config(project: str, items: Sequence[agent_pb2.ConfigItem], lookup_env: EnvLookup,
                read_file: FileReader) -> ConfigPlan:
    """The ``config set-all`` plan for the items, or an :class:`AgentError` with the reference's status."""
    if any(is_structured(item) for item in items):
        for item in items:
            if item.path and is_structured(item):
                raise AgentError(grpc.StatusCode.INVALID_ARGUMENT,
                                 f"config item {json.dumps(item.key)}: path=true is incompatible with JSON values")
        document: dict[str, dict[str, Any]] = {}
        for item in items:
            if item.path:
                continue
            namespace, name = parse_key(item.key, project)
            try:
                document[f"{namespace}:{name}"] = _json_entry(item, lookup_env, read_file)
            except AgentError as err:
                if err.rpc.code == grpc.StatusCode.UNKNOWN:
                    raise
                raise _wrap("config items", err) from None
        return ConfigPlan(json_document=document, plain=_plain_items(project, [i for i in items if i.path],
                                                                        lookup_env, read_file))
    return ConfigPlan(plain=_plain_items(project, items, lookup_env, read_file))


def _plain_items(project: str, items: Sequence[agent_pb2.ConfigItem], lookup_env: EnvLookup,
                 read_file: FileReader) -> list[PlainItem]:
    plain: list[PlainItem] = []
    for item in items:
        try:
            value = _plain_value(item, lookup_env, read_file)
        except AgentError as err:
            raise _wrap(f"config items: unmarshalling {json.dumps(item.key)} config", err) from None
        namespace, name = parse_key(item.key, project)
        if item.path:
            plain.append(PlainItem(f"{namespace}:{name}", value, item.secret))
        else:
            plain.append(PlainItem(f"{namespace}:{_escaped(name)}", value, item.secret,
                                   literal=f"{namespace}:{name}" if _literal_safe(name) else None))
    return plain
