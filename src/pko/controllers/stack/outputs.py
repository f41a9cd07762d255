"""Publishing a Stack's outputs into a Secret / ConfigMap it owns (pko's `spec.outputs`, docs/outputs.md) — pure.

Why: the Go operator leaves outputs in a per-Update Secret with a generated name (deleted with its Update) and in
`status.outputs` with secrets masked; workloads want a stable object to mount. :func:`plan` turns the outputs of a
successful update and `spec.outputs` into the data of the Secret and the ConfigMap, or into the problems that stop
it (a selected output or a template reference that does not exist, a template expression we do not understand);
:func:`desired` builds the objects, owned by the Stack; :func:`foreign` tells an existing object the Stack does not
own (never overwritten). The executor (the Stack reconciler) reads, writes and reports.

Rules: `keys` left out selects every output, `[]` none (only the template); the Secret gets every selected output
and rendered template entry, the ConfigMap only those that hold nothing secret; with a ConfigMap alone, secret ones
are left out and named. A string is written as is, anything else as compact JSON. A template is text with
``{{ .outputs.<name> }}`` references (``.outputs.<name>.<field>`` or ``.<index>`` reaches into structured ones):
substitution only, no functions, no code; any other ``{{ … }}`` is an error.

Must never: put an output's value into a problem, a message or an event (names only), or do I/O.
"""

from __future__ import annotations

import base64
import datetime
import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pko.api import conditions, names
from pko.api import stack as stack_api
from pko.api.meta import Condition
from pko.kube import objects, owners, resources

# The condition (pko's own type; the Go operator has none like it) and its reasons.
CONDITION = "OutputsPublished"
REASON_PUBLISHED = "Published"
REASON_OUTPUT_MISSING = "OutputMissing"
REASON_TEMPLATE_INVALID = "TemplateInvalid"
REASON_NAME_CONFLICT = "NameConflict"
REASON_WRITE_FAILED = "WriteFailed"
REASON_OUTPUTS_UNAVAILABLE = "OutputsUnavailable"
EVENT_NOT_PUBLISHED = "OutputsNotPublished"
# Which update's outputs an object holds.
ANNOTATION_UPDATE = "pulumi.com/update-name"

_EXPRESSION = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_REFERENCE = re.compile(r"^\s*\.outputs((?:\.[-_a-zA-Z0-9]+)+)\s*$")


@dataclass(frozen=True)
class Plan:
    """What to write: the data of each object (None when the spec names no such object), the secret values left out
    for want of a Secret (their data keys), or the problems that stop writing anything (`reason` says which kind)."""

    secret: dict[str, str] | None = None
    config_map: dict[str, str] | None = None
    withheld: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    reason: str = REASON_PUBLISHED

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class _Rendered:
    value: str
    secret: bool
    missing: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)


def render_value(value: Any) -> str:
    """An output as data: a string as is (a URL mounts as the URL, not as a JSON string), others as compact JSON
    with sorted keys (so an unchanged output writes the same bytes)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _lookup(outputs: Mapping[str, Any], path: Sequence[str]) -> tuple[bool, Any]:
    """(found, value) of a dotted path: the first part is an output name, the rest fields or list indices."""
    if path[0] not in outputs:
        return False, None
    value = outputs[path[0]]
    for part in path[1:]:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


def render(template: str, outputs: Mapping[str, Any], secret_outputs: Collection[str]) -> _Rendered:
    """One template string: each ``{{ .outputs.<path> }}`` replaced; missing paths and unknown expressions are
    collected (by name, never by value), and the result is secret when it used a secret output."""
    result = _Rendered("", False)
    pieces: list[str] = []
    position = 0
    for match in _EXPRESSION.finditer(template):
        pieces.append(template[position:match.start()])
        position = match.end()
        reference = _REFERENCE.match(match.group(1))
        if reference is None:
            result.invalid.append(match.group(0).strip())
            continue
        path = reference.group(1)[1:].split(".")
        found, value = _lookup(outputs, path)
        if not found:
            result.missing.append(".".join(path))
            continue
        result.secret = result.secret or path[0] in secret_outputs
        pieces.append(render_value(value))
    rest = template[position:]
    if "{{" in rest:
        result.invalid.append("an unclosed {{")
    pieces.append(rest)
    result.value = "".join(pieces)
    return result


def plan(spec: stack_api.StackOutputs, outputs: Mapping[str, Any], secret_outputs: Collection[str]) -> Plan:
    """The data to publish from the `outputs` of a successful update (`secret_outputs`: the names that are
    secret), or the problems that stop it; nothing is written when any output is missing, so the objects keep
    holding one update's consistent set."""
    selected = sorted(outputs) if spec.keys is None else list(spec.keys)
    entries: dict[str, tuple[str, bool]] = {}
    missing: list[str] = []
    invalid: list[str] = []
    for key in selected:
        if key not in outputs:
            missing.append(f"output {key!r} (spec.outputs.keys) does not exist")
            continue
        entries[key] = (render_value(outputs[key]), key in secret_outputs)
    for key, template in sorted((spec.template or {}).items()):
        rendered = render(template, outputs, secret_outputs)
        missing += [f"output {path!r} (spec.outputs.template.{key}) does not exist" for path in rendered.missing]
        invalid += [f"spec.outputs.template.{key}: {expr!r} is not an output reference ({{{{ .outputs.<name> }}}})"
                    for expr in rendered.invalid]
        entries[key] = (rendered.value, rendered.secret)  # a template entry replaces an output of the same name
    if invalid:
        return Plan(problems=tuple(invalid + missing), reason=REASON_TEMPLATE_INVALID)
    if missing:
        available = ", ".join(sorted(outputs)) or "none"
        return Plan(problems=(*missing, f"the stack's outputs are: {available}"), reason=REASON_OUTPUT_MISSING)
    secret = {k: v for k, (v, _) in entries.items()} if spec.secret_name else None
    config_map = {k: v for k, (v, is_secret) in entries.items() if not is_secret} if spec.config_map_name else None
    withheld = tuple(sorted(k for k, (_, is_secret) in entries.items() if is_secret)) if secret is None else ()
    return Plan(secret=secret, config_map=config_map, withheld=withheld)


def desired(kind: resources.Kind, name: str, data: Mapping[str, str], stack: stack_api.Stack,
            update_name: str) -> objects.Object:
    """The Secret or ConfigMap to write: `data` (base64 for a Secret), the Stack's labels, the Update it came
    from, and the Stack as controller (so deleting the Stack deletes it)."""
    stack_name = stack.metadata.name or ""
    body: dict[str, Any] = {"data": dict(sorted(data.items()))}
    if kind == resources.SECRET:
        body = {"type": "Opaque",
                "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(data.items())}}
    obj = kind.new(name, stack.metadata.namespace, **body)
    obj["metadata"]["labels"] = names.stack_component_labels(stack_name)
    obj["metadata"]["annotations"] = {ANNOTATION_UPDATE: update_name}
    return owners.set_controller_reference(obj, stack)


def foreign(existing: objects.Object, stack: stack_api.Stack) -> bool:
    """The object exists and the Stack (this one, by uid) is not its controller: someone else's, never touched."""
    ref = owners.controller_of(existing)
    return ref is None or ref.get("uid") != stack.metadata.uid


def replacement(existing: objects.Object, want: objects.Object) -> objects.Object:
    """`want` as a PUT over `existing`: at its resourceVersion (a change meanwhile is a Conflict, never lost), other
    labels and annotations kept, the data replaced as a whole (keys no longer published go away)."""
    meta = objects.metadata(existing)
    result = dict(want)
    result["metadata"] = {
        **want["metadata"],
        "resourceVersion": meta.get("resourceVersion"),
        "labels": {**(meta.get("labels") or {}), **want["metadata"]["labels"]},
        "annotations": {**(meta.get("annotations") or {}), **want["metadata"]["annotations"]},
    }
    return result


def published_message(spec: stack_api.StackOutputs, result: Plan) -> str:
    """The True condition's message: where the outputs went (key names), and what was left out (names)."""
    parts = []
    if result.secret is not None:
        parts.append(f"Secret {spec.secret_name} ({_keys(result.secret)})")
    if result.config_map is not None:
        parts.append(f"ConfigMap {spec.config_map_name} ({_keys(result.config_map)})")
    message = "published to " + " and ".join(parts)
    if result.withheld:
        message += (f"; secret outputs left out of the ConfigMap (no secretName): {', '.join(result.withheld)}")
    return message


def _keys(data: Mapping[str, str]) -> str:
    return f"keys: {', '.join(sorted(data))}" if data else "no keys"


def mark(found: Sequence[Condition] | None, status: bool, reason: str, message: str, *,
         now: datetime.datetime) -> list[Condition]:
    return conditions.set_condition(found, CONDITION, "True" if status else "False", reason, message, now=now)


def clear(found: Sequence[Condition] | None) -> list[Condition]:
    """No `spec.outputs` (any more): no condition about it."""
    return conditions.remove(found, CONDITION)
