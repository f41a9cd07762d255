"""Stack outputs as another Stack's config (pko `spec.outputRefs`, docs/stack-dependencies.md) — pure.

Why: a fleet wires Stacks together (a network Stack's subnet IDs feed the cluster Stacks); `prerequisites` only
gate on freshness. A downstream Stack names, per config key, an upstream Stack in its own namespace and one of its
outputs; the operator copies the values into an immutable Secret the downstream owns, named by the digest of what
it holds, and the Workspace reads them from there as config (secret when the output was a secret). The downstream
runs **only when a value it references changes**: each update records a digest per config key
(`lastUpdate.outputRefs`), and a reconcile that finds other digests is due an update, as a new commit is. An upstream
update that leaves the values alone changes no digest, and triggers nothing.

Values come from the upstream's last successful `up` (its Update's outputs Secret); when that is not there (the
upstream's last update failed, or the Update was cleaned up after its `ttlAfterCompleted`), from the copy the
downstream's last update used. An output that neither has is waited for, with a condition that names it. References
that form a cycle are refused.

Must never: put a value into a status, event, log or the Workspace (values travel only in Secrets), or do I/O.
"""

from __future__ import annotations

import base64
import hashlib
import json
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pko.api import names
from pko.api import stack as stack_api
from pko.kube import owners, resources

MOUNT = "/var/run/secrets/stacks.pulumi.com/outputs/"
VOLUME = "pko-output-refs"
LABEL_COMPONENT_VALUE = "output-refs"
WAITING_REASON = "WaitingForOutput"
CYCLE_REASON = "OutputRefCycle"
CHANGED_MESSAGE = "Referenced outputs changed"


@dataclass(frozen=True)
class Value:
    """One referenced value: the output's JSON encoding, and whether it is a secret."""

    data: bytes
    secret: bool

    @property
    def digest(self) -> str:
        """Identifies the value (and its secrecy) in status without showing it: 16 hex digits of its SHA-256."""
        return hashlib.sha256((b"s:" if self.secret else b"p:") + self.data).hexdigest()[:16]


@dataclass(frozen=True)
class Outputs:
    """What one upstream Stack offers: its output values by name (JSON) and the names of its secret outputs."""

    values: Mapping[str, bytes]
    secrets: frozenset[str] = frozenset()


@dataclass
class Resolution:
    """The referenced values by config key, or what is missing (config key → why)."""

    values: dict[str, Value] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    @property
    def digests(self) -> dict[str, str]:
        return {key: value.digest for key, value in sorted(self.values.items())}


@dataclass(frozen=True)
class Carried:
    """What the Workspace gets: the Secret that carries the values, its config items, and the digests the update
    records."""

    secret_name: str
    config: list[dict[str, Any]]
    digests: dict[str, str]


def carried(stack: stack_api.Stack, resolution: Resolution) -> Carried:
    return Carried(secret_name(stack.metadata.name or "", resolution.digests), config_items(resolution),
                   resolution.digests)


def refs_of(stack: stack_api.Stack) -> dict[str, stack_api.OutputRef]:
    return dict(stack_api.spec_of(stack).output_refs or {})


def upstreams(stack: stack_api.Stack) -> set[str]:
    """The Stacks this one reads outputs of."""
    return {ref.stack_name for ref in refs_of(stack).values()}


def upstreams_of_object(obj: Mapping[str, Any]) -> set[str]:
    """The Stacks a Stack object (as the API server has it) reads outputs of: also the informer's index."""
    refs = (obj.get("spec") or {}).get("outputRefs") or {}
    if not isinstance(refs, Mapping):
        return set()
    return {str(ref["stackName"]) for ref in refs.values() if isinstance(ref, Mapping) and ref.get("stackName")}


def cycle(start: str, edges: Mapping[str, Iterable[str]]) -> list[str] | None:
    """A path of references from `start` back to itself (`[a, b, a]`), or None; `edges` maps each Stack of the
    namespace to the Stacks it reads outputs of. Depth first, neighbours in name order: the same cycle is named the
    same way every time."""
    path: list[str] = [start]
    seen: set[str] = set()

    def walk(node: str) -> list[str] | None:
        for nxt in sorted(set(edges.get(node, ()))):
            if nxt == start:
                return [*path, start]
            if nxt in seen:
                continue
            seen.add(nxt)
            path.append(nxt)
            found = walk(nxt)
            if found is not None:
                return found
            path.pop()
        return None

    return walk(start)


def cycle_message(found: list[str]) -> str:
    return ("spec.outputRefs form a cycle: " + " → ".join(found)
            + "; a Stack cannot depend on its own outputs, directly or through others")


def resolve(stack: stack_api.Stack, offered: Mapping[str, Outputs | str],
            kept: Mapping[str, Value]) -> Resolution:
    """The value of each reference: from the upstream's outputs when it offers the output (`offered` maps each
    upstream's name to its outputs, or to why it offers none), else the value the last update used (`kept`, by
    config key), else missing with the reason."""
    found = Resolution()
    for key, ref in sorted(refs_of(stack).items()):
        upstream = offered.get(ref.stack_name)
        if isinstance(upstream, Outputs) and ref.output in upstream.values:
            found.values[key] = Value(upstream.values[ref.output],
                                      ref.output in upstream.secrets or bool(ref.secret))
        elif key in kept:
            found.values[key] = Value(kept[key].data, kept[key].secret or bool(ref.secret))
        elif isinstance(upstream, Outputs):
            found.missing[key] = f'Stack "{ref.stack_name}" has no output "{ref.output}"'
        else:
            found.missing[key] = upstream or f'Stack "{ref.stack_name}" has no outputs yet'
    return found


def waiting_message(missing: Mapping[str, str]) -> str:
    parts = [f'config "{key}": {why}' for key, why in sorted(missing.items())]
    return "waiting for referenced outputs: " + "; ".join(parts)


def changed(last: Mapping[str, str] | None, current: Mapping[str, str]) -> list[str]:
    """The config keys whose referenced value differs from the last update's (added or removed keys too)."""
    last = dict(last or {})
    return sorted(key for key in set(last) | set(current) if last.get(key) != current.get(key))


def secret_name(stack_name: str, digests: Mapping[str, str]) -> str:
    """The copy's name: the Stack's name and a digest of every key's value digest (a change is a new Secret, so the
    Workspace changes with it and never reads a stale mounted copy)."""
    whole = hashlib.sha256(json.dumps(dict(sorted(digests.items()))).encode()).hexdigest()[:10]
    return f"{stack_name}-outputs-{whole}"


def _file(index: int) -> str:
    # config keys hold ':' (project:key), which a Secret's data key cannot: files are numbered in key order
    return f"value-{index}"


def _json_file(index: int) -> str:
    return f"json-{index}"


def copy_secret(stack: stack_api.Stack, resolution: Resolution) -> dict[str, Any]:
    """The immutable Secret that carries the values to the Workspace, owned by the Stack (removed with it)."""
    name = stack.metadata.name or ""
    keys = sorted(resolution.values)
    secret = resources.SECRET.new(secret_name(name, resolution.digests), stack.metadata.namespace)
    secret["metadata"]["labels"] = names.stack_component_labels(name) | {
        names.LABEL_COMPONENT: LABEL_COMPONENT_VALUE}
    secret["metadata"]["annotations"] = {names.ANNOTATION_OUTPUT_REF_KEYS: json.dumps(
        {key: {"file": _file(i), "secret": resolution.values[key].secret} for i, key in enumerate(keys)})}
    secret["immutable"] = True
    secret["type"] = "Opaque"
    data: dict[str, str] = {}
    for i, key in enumerate(keys):
        value = resolution.values[key].data
        data[_file(i)] = base64.b64encode(_as_config(value)).decode()
        data[_json_file(i)] = base64.b64encode(value).decode()  # as the upstream had it: the digest's input
    secret["data"] = data
    owner = {"apiVersion": stack_api.API_VERSION, "kind": stack_api.KIND,
             "metadata": {"name": name, "uid": stack.metadata.uid, "namespace": stack.metadata.namespace}}
    return owners.set_controller_reference(secret, owner)


def _as_config(data: bytes) -> bytes:
    """What the config value is: a string output as the string itself, any other value as its JSON text (which
    `Config.get_object` / `get_int` / `get_bool` read back). Not `valueFrom.json`: the CLI's `config set-all --json`
    refuses a secret with an object value ("invalid character 'v' looking for beginning of value")."""
    try:
        value = json.loads(data)
    except ValueError:
        return data
    return value.encode() if isinstance(value, str) else data


def kept_values(secret: Mapping[str, Any] | None) -> dict[str, Value]:
    """The values a copy holds, by config key (what the last update used)."""
    if secret is None:
        return {}
    try:
        layout = json.loads(((secret.get("metadata") or {}).get("annotations") or {}).get(
            names.ANNOTATION_OUTPUT_REF_KEYS, "{}"))
    except ValueError:
        return {}
    data = secret.get("data") or {}
    found: dict[str, Value] = {}
    for key, where in layout.items():
        raw = data.get(str(where.get("file", "")).replace("value-", "json-", 1))
        if isinstance(raw, str):
            found[key] = Value(base64.b64decode(raw), bool(where.get("secret")))
    return found


def config_items(resolution: Resolution) -> list[dict[str, Any]]:
    """The Workspace's config items for the references: the values, as config, from the mounted copy."""
    return [{"key": key, "valueFrom": {"path": posixpath.join(MOUNT, _file(i))},
             "secret": resolution.values[key].secret}
            for i, key in enumerate(sorted(resolution.values))]
