"""Stack outputs as another Stack's config (pko `spec.outputRefs`, docs/stack-dependencies.md) — pure.

Why: a fleet wires Stacks together (a network Stack's subnet IDs feed the cluster Stacks); `prerequisites` only
gate on freshness. A downstream Stack names, per config key, an upstream Stack in its own namespace and one of its
outputs; the operator copies the values into a Secret the downstream owns (its *copy*, `<stack>-output-refs`) and the
Workspace reads them from there as config (secret when the output was a secret). The downstream runs **only when a
value it references changes**: each update records a digest per config key (`lastUpdate.outputRefs`), and a
reconcile that finds other digests is due an update, as a new commit is. An upstream update that leaves the values
alone changes no digest, and triggers nothing.

The digests are keyed hashes (HMAC-SHA-256 with a random key kept in the copy): a plain hash of a low-entropy secret
(`true`, a port, an environment name) in the Stack's status would give the value away. A digest of the digests goes
on the Workspace's pod template, so new values are a new pod that mounts them (a mounted Secret is refreshed late,
and the agent reads its config once). One copy per Stack, updated in place: the operator keeps the reference's
permissions, which grant no deletion of Secrets.

Values come from the upstream's last successful `up` (its Update's outputs Secret); when that is not there, from
the copy, when it holds the same output of the same Stack. An output that neither has is waited for, with a
condition that names it; an upstream whose outputs went with its cleaned-up Update is asked for a new `up`.
References that form a cycle are refused.

Must never: put a value into a status, event, log or the Workspace (values travel only in Secrets), or do I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
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
KEY_FILE = "digest-key"  # the copy's data key that holds the digests' key
KEY_BYTES = 32


@dataclass(frozen=True)
class Value:
    """One referenced value, as the config value it becomes (:func:`as_config`), whether it is a secret, and where
    it was read (Stack, output)."""

    data: bytes
    secret: bool
    source: tuple[str, str] = ("", "")

    def digest(self, key: bytes) -> str:
        """Identifies the value and its secrecy in status without giving it away: 16 hex digits of an HMAC."""
        return hmac.new(key, (b"s:" if self.secret else b"p:") + self.data, hashlib.sha256).hexdigest()[:16]


@dataclass(frozen=True)
class Outputs:
    """What one upstream Stack offers: its output values by name (JSON) and the names of its secret outputs."""

    values: Mapping[str, bytes]
    secrets: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Gone:
    """The upstream's last successful `up` is known but its outputs are gone (its Update was cleaned up after its
    `ttlAfterCompleted`): only a new `up` of the upstream brings them back."""

    update: str

    def reason(self, stack_name: str) -> str:
        return (f'the outputs of Stack "{stack_name}"\'s last update ({self.update}) are gone; its resync is '
                "requested")


@dataclass
class Resolution:
    """The referenced values by config key, or what is missing (config key → why), and the digests' key."""

    key: bytes
    values: dict[str, Value] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    @property
    def digests(self) -> dict[str, str]:
        return {name: value.digest(self.key) for name, value in sorted(self.values.items())}


@dataclass(frozen=True)
class Kept:
    """What a copy holds: the values by config key and the digests' key."""

    key: bytes
    values: dict[str, Value]


@dataclass(frozen=True)
class Carried:
    """What the Workspace gets: the Secret that carries the values, its config items, the digests the update
    records and their :func:`revision`."""

    secret_name: str
    config: list[dict[str, Any]]
    digests: dict[str, str]

    @property
    def revision(self) -> str:
        return revision(self.digests)


def carried(stack: stack_api.Stack, resolution: Resolution) -> Carried:
    return Carried(secret_name(stack.metadata.name or ""), config_items(resolution), resolution.digests)


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


def as_config(data: bytes) -> bytes:
    """The config value an output's JSON becomes: a string output the string itself, any other value its JSON text
    (which `Config.get_int` / `get_bool` / `get_object` read back). Not `valueFrom.json`: the CLI's
    `config set-all --json` refuses a secret with an object value ("invalid character 'v' looking for beginning of
    value")."""
    try:
        value = json.loads(data)
    except ValueError:
        return data
    return value.encode() if isinstance(value, str) else data


def resolve(stack: stack_api.Stack, offered: Mapping[str, Outputs | Gone | str], kept: Kept) -> Resolution:
    """The value of each reference: from the upstream's outputs when it offers the output (`offered` maps each
    upstream's name to its outputs, or to why it offers none), else the value the last update read from the same
    output of the same Stack (`kept`), else missing with the reason."""
    found = Resolution(kept.key)
    for key, ref in sorted(refs_of(stack).items()):
        upstream = offered.get(ref.stack_name)
        source = (ref.stack_name, ref.output)
        output = names.outputs_secret_key(ref.output)  # as the Update's outputs Secret holds it
        previous = kept.values.get(key)
        if isinstance(upstream, Outputs) and output in upstream.values:
            found.values[key] = Value(as_config(upstream.values[output]),
                                      output in upstream.secrets or bool(ref.secret), source)
        elif previous is not None and previous.source == source:
            found.values[key] = Value(previous.data, previous.secret or bool(ref.secret), source)
        elif isinstance(upstream, Outputs):
            found.missing[key] = f'Stack "{ref.stack_name}" has no output "{ref.output}"'
        elif isinstance(upstream, Gone):
            found.missing[key] = upstream.reason(ref.stack_name)
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


def secret_name(stack_name: str) -> str:
    """The copy's name (Stack names are at most 42 characters: it stays a valid name)."""
    return f"{stack_name}-output-refs"


def revision(digests: Mapping[str, str]) -> str:
    """One digest of every key's digest: on the pod template, and what an approved plan was previewed with."""
    return hashlib.sha256(json.dumps(dict(sorted(digests.items()))).encode()).hexdigest()[:16]


def _file(index: int) -> str:
    # config keys hold ':' (project:key), which a Secret's data key cannot: files are numbered in key order
    return f"value-{index}"


def copy_secret(stack: stack_api.Stack, resolution: Resolution) -> dict[str, Any]:
    """The Secret that carries the values to the Workspace, owned by the Stack (removed with it)."""
    name = stack.metadata.name or ""
    keys = sorted(resolution.values)
    secret = resources.SECRET.new(secret_name(name), stack.metadata.namespace)
    secret["metadata"]["labels"] = names.stack_component_labels(name) | {
        names.LABEL_COMPONENT: LABEL_COMPONENT_VALUE}
    secret["metadata"]["annotations"] = {names.ANNOTATION_OUTPUT_REF_KEYS: json.dumps(
        {key: {"file": _file(i), "secret": resolution.values[key].secret, "stackName": resolution.values[key].source[0],
               "output": resolution.values[key].source[1]} for i, key in enumerate(keys)})}
    secret["type"] = "Opaque"
    data = {_file(i): base64.b64encode(resolution.values[key].data).decode() for i, key in enumerate(keys)}
    data[KEY_FILE] = base64.b64encode(resolution.key).decode()
    secret["data"] = data
    owner = {"apiVersion": stack_api.API_VERSION, "kind": stack_api.KIND,
             "metadata": {"name": name, "uid": stack.metadata.uid, "namespace": stack.metadata.namespace}}
    return owners.set_controller_reference(secret, owner)


def holds(secret: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """The copy already holds what `wanted` (a :func:`copy_secret`) would write: nothing to update."""
    def annotation(obj: Mapping[str, Any]) -> Any:
        return ((obj.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_OUTPUT_REF_KEYS)
    return bool(secret.get("data") == wanted.get("data") and annotation(secret) == annotation(wanted))


def owned_by(secret: Mapping[str, Any], stack: stack_api.Stack) -> bool:
    return any(ref.get("uid") == stack.metadata.uid and ref.get("controller")
               for ref in (secret.get("metadata") or {}).get("ownerReferences") or [])


def not_ours_message(stack: stack_api.Stack) -> str:
    return (f"Secret {secret_name(stack.metadata.name or '')} exists and is not this Stack's: spec.outputRefs "
            "carries its values in a Secret of that name; rename or remove the other one")


def kept(secret: Mapping[str, Any] | None, new_key: bytes) -> Kept:
    """What a copy holds (what the last update read); none, with `new_key` for the digests, without a copy."""
    if secret is None:
        return Kept(new_key, {})
    data = secret.get("data") or {}
    try:
        layout = json.loads(((secret.get("metadata") or {}).get("annotations") or {}).get(
            names.ANNOTATION_OUTPUT_REF_KEYS, "{}"))
        key = base64.b64decode(data[KEY_FILE])
    except (ValueError, KeyError, TypeError):
        return Kept(new_key, {})
    found: dict[str, Value] = {}
    for name, where in layout.items():
        raw = data.get(str(where.get("file", "")))
        if isinstance(raw, str):
            found[name] = Value(base64.b64decode(raw), bool(where.get("secret")),
                                (str(where.get("stackName", "")), str(where.get("output", ""))))
    return Kept(key, found)


def config_items(resolution: Resolution) -> list[dict[str, Any]]:
    """The Workspace's config items for the references: the values, as config, from the mounted copy."""
    return [{"key": key, "valueFrom": {"path": posixpath.join(MOUNT, _file(i))},
             "secret": resolution.values[key].secret}
            for i, key in enumerate(sorted(resolution.values))]
