"""Reading what the Pulumi CLI prints (``stack ls``, ``stack history``, ``stack output``, the project file, the
operation's text) into the protocol's messages.

Field by field this follows the reference agent: a stack summary always carries ``url`` (possibly empty), a time
the reference cannot parse is left unset, an output is secret when the masked listing shows ``[secret]`` and its
value is the Go-style JSON encoding, and a permalink is the URL after ``View Live:`` (or its newer spellings).

Pure: strings and dicts in, messages out. It must never log output values.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from google.protobuf import timestamp_pb2

from pko.agent import gojson, project
from pko.protocol.proto import agent_pb2

SECRET_MASK = "[secret]"
_PERMALINK = re.compile(r"(?:View Live|View in Browser|View in Browser \(Ctrl\+O\)|Permalink): (\S+)")
_RFC3339 = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$"
)


def timestamp(text: str | None) -> timestamp_pb2.Timestamp | None:
    """An RFC 3339 time (nanosecond precision kept), or None when absent or unparsable."""
    if not text:
        return None
    match = _RFC3339.match(text.strip())
    if not match:
        return None
    date, clock, fraction, zone = match.groups()
    zone = "+00:00" if zone in ("Z", "z") else zone
    try:
        parsed = datetime.fromisoformat(f"{date}T{clock}{zone}")
    except ValueError:
        return None
    nanos = int((fraction or "0")[:9].ljust(9, "0"))
    return timestamp_pb2.Timestamp(seconds=int(parsed.timestamp()), nanos=nanos)


def stack_summary(entry: dict[str, Any]) -> agent_pb2.StackSummary:
    """One entry of ``pulumi stack ls --json``."""
    summary = agent_pb2.StackSummary(
        name=str(entry.get("name", "")),
        update_in_progress=bool(entry.get("updateInProgress", False)),
        url=str(entry.get("url") or ""),
    )
    last_update = timestamp(entry.get("lastUpdate"))
    if last_update is not None:
        summary.last_update.CopyFrom(last_update)
    count = entry.get("resourceCount")
    if isinstance(count, int):
        summary.resource_count = count
    return summary


def current_stack(stack_ls_json: str) -> dict[str, Any] | None:
    """The entry marked current in ``pulumi stack ls --json``, if any."""
    for entry in json.loads(stack_ls_json or "[]") or []:
        if isinstance(entry, dict) and entry.get("current"):
            return entry
    return None


def update_summary(history_json: str) -> agent_pb2.UpdateSummary | None:
    """The latest entry of ``pulumi stack history --json --page-size 1``, or None for an empty history."""
    entries = json.loads(history_json or "[]") or []
    if not entries:
        return None
    entry = entries[0]
    summary = agent_pb2.UpdateSummary(result=str(entry.get("result", "")), message=str(entry.get("message", "")))
    start = timestamp(entry.get("startTime"))
    if start is not None:
        summary.start_time.CopyFrom(start)
    end = timestamp(entry.get("endTime"))
    if end is not None:
        summary.end_time.CopyFrom(end)
    return summary


def outputs(masked_json: str, plain_json: str) -> dict[str, agent_pb2.OutputValue]:
    """Stack outputs from ``stack output --json`` (masked) and ``--show-secrets`` (plain)."""
    masked = json.loads(masked_json or "{}") or {}
    plain = json.loads(plain_json or "{}") or {}
    return {
        key: agent_pb2.OutputValue(value=gojson.dumps(value).encode(), secret=masked.get(key) == SECRET_MASK)
        for key, value in plain.items()
    }


def permalink(stdout: str) -> str | None:
    """The update's permalink printed by the CLI (none for a self-managed backend)."""
    match = _PERMALINK.search(stdout)
    return match.group(1) if match else None


def project_info(settings: dict[str, Any]) -> agent_pb2.ProjectInfo:
    """Name and runtime from a parsed ``Pulumi.yaml`` (``runtime`` may be a string or ``{name: ...}``)."""
    return agent_pb2.ProjectInfo(name=str(settings.get("name", "")), runtime=project.runtime_name(settings))


# --- an operation's result from its own engine events -------------------------------------------------------------
#
# After an `up` the reference's Automation API runs `stack output` twice (masked, then with secrets) and `stack
# history`: three more CLI processes per update, two of them decrypting the stack's secrets. The engine events of
# the `up` already carry the root Stack resource's outputs (secrets as a signature object with a masked
# ciphertext) and the result, so the agent asks the CLI again only for what the events cannot give: the plaintext
# of secret (or otherwise signature-encoded: assets, archives, resource references) outputs.

SIGNATURE_KEY = "4dabf18193072939515e22adb298388d"
SECRET_SIGNATURE = "1b47061264138c4ac30d75fd1eb44270"
ROOT_STACK_TYPE = "pulumi:pulumi:Stack"


def root_stack_outputs(event: dict[str, Any]) -> dict[str, Any] | None:
    """The outputs of the root Stack resource that a ``resOutputsEvent`` reports, else None."""
    body = event.get("resOutputsEvent")
    metadata = body.get("metadata") if isinstance(body, dict) else None
    new = metadata.get("new") if isinstance(metadata, dict) else None
    if not isinstance(new, dict) or new.get("type") != ROOT_STACK_TYPE or new.get("parent"):
        return None
    outputs = new.get("outputs")
    return outputs if isinstance(outputs, dict) else {}


def has_signature(value: Any) -> bool:
    """Whether `value` holds a signature object anywhere (a secret, asset, archive or resource reference)."""
    if isinstance(value, dict):
        return SIGNATURE_KEY in value or any(has_signature(v) for v in value.values())
    if isinstance(value, list):
        return any(has_signature(v) for v in value)
    return False


def is_secret(value: Any) -> bool:
    """Whether a top-level output is a secret (what `stack output --json` shows as ``[secret]``)."""
    return isinstance(value, dict) and value.get(SIGNATURE_KEY) == SECRET_SIGNATURE


def outputs_from_event(seen: dict[str, Any], plain_json: str | None) -> dict[str, agent_pb2.OutputValue]:
    """Stack outputs from the root Stack's outputs in the engine events; `plain_json` (``stack output --json
    --show-secrets``) supplies the values when any output holds a signature (:func:`has_signature`)."""
    plain = seen if plain_json is None else (json.loads(plain_json or "{}") or {})
    return {key: agent_pb2.OutputValue(value=gojson.dumps(value).encode(), secret=is_secret(seen.get(key)))
            for key, value in plain.items()}


def own_summary(started: datetime, ended: datetime, result: str, message: str) -> agent_pb2.UpdateSummary:
    """The summary of an operation the agent ran and timed itself (what its history entry records, to the
    second)."""
    summary = agent_pb2.UpdateSummary(result=result, message=message)
    summary.start_time.FromSeconds(int(started.timestamp()))
    summary.end_time.FromSeconds(int(ended.timestamp()))
    return summary


def summary_result(event: dict[str, Any]) -> str | None:
    """The result a ``summaryEvent`` reports (``succeeded``, ``failed``...), else None."""
    body = event.get("summaryEvent")
    result = body.get("result") if isinstance(body, dict) else None
    return result if isinstance(result, str) and result else None
