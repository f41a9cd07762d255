"""What to do with an Update, and the status an operation's outcome produces — pure, state in, decision out.

Why separate: the rules (TTL expiry, "an Update found Progressing after a restart was aborted", the conditions a
result or an agent error maps to, how outputs become an immutable Secret) are the contract of pko-v2 §3.3 and are
tested here without an agent or an API server.

Must never: read the clock or do I/O (callers pass `now` and the observed objects).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import enum
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pko.api import conditions, durations, names
from pko.api import update as up_api
from pko.api.meta import Condition
from pko.kube import builtins
from pko.protocol import status as pstatus

# Condition reasons (the Go operator's).
REASON_PROGRESSING = "Progressing"
REASON_COMPLETE = "Complete"
REASON_UPDATED = "Updated"
REASON_FAILED = "Failed"
REASON_SUCCEEDED = "UpdateSucceeded"
REASON_UPDATE_FAILED = "UpdateFailed"
REASON_ABORTED = "Aborted"
REASON_CANCELED = "Canceled"
REASON_WORKSPACE_NOT_FOUND = "WorkspaceNotFound"
REASON_WORKSPACE_NOT_READY = "WorkspaceNotReady"
REASON_TRANSIENT = "TransientFailure"
REASON_DEADLINE_EXCEEDED = "DeadlineExceeded"  # pko: the operation ran longer than its timeout, and was cancelled
REASON_RESOURCES_REMAIN = "ResourcesRemain"  # pko: a TTL's destroy left resources in the stack (docs/ttl.md)
REASON_IDLE_TIMEOUT = "IdleTimeout"  # the operation went silent for longer than its idle timeout, and was cancelled
REASON_PLANS_UNSUPPORTED = "UpdatePlansUnsupported"  # pko: approvals need an agent that saves and applies plans
PLANS_UNSUPPORTED_MESSAGE = ("the workspace agent does not support update plans (spec.approval needs the pko "
                             "agent); nothing was applied")
DESTROY_PREVIEW_UNSUPPORTED_MESSAGE = ("the workspace agent cannot preview a destroy (destroy protection needs the "
                                      "pko agent); nothing was deleted")
CAPABILITIES_HEADER = "pko-agent-capabilities"
CAPABILITY_PLANS = "update-plans"
CAPABILITY_DESTROY_PREVIEW = "destroy-preview"
CAPABILITY_RESUME = "resume-update"
CAPABILITY_KEEP_RUNNING = "keep-running"  # the agent keeps an `up` running past its caller (pko.agent.kept)
MAX_PLANNED_RESOURCES = 100  # URNs kept on the Update (and the Stack's status) for a destroy preview
UNKNOWN_ERROR = "An unknown error occurred"


class Action(enum.Enum):
    IGNORE = "ignore"  # completed, no TTL
    WAIT_TTL = "wait-ttl"  # completed, requeue when the TTL runs out
    EXPIRE = "expire"  # completed and past its TTL: delete it
    ABORT = "abort"  # found Progressing with no operation of ours running: it was interrupted
    RESUME = "resume"  # an interrupted `up`: ask a pko agent for its result before aborting (pko.agent.resume)
    CANCEL = "cancel"  # being deleted, or no longer owned by a workspace: never start it
    START = "start"


@dataclasses.dataclass(frozen=True)
class Decision:
    action: Action
    requeue_after: float | None = None
    resume_after: datetime.datetime | None = None  # RESUME: when the interrupted `up` was started


def decide(update: up_api.Update, *, running: bool, deleting: bool, has_controller: bool,
           now: datetime.datetime) -> Decision:
    """The next step for `update` (`running`: an operation of this process is in flight for it)."""
    found = (update.status.conditions if update.status else None) or []
    complete = conditions.find(found, conditions.COMPLETE)
    if complete is not None and complete.status == "True":
        ttl_text = update.spec.ttl_after_completed if update.spec else None
        if not ttl_text:
            return Decision(Action.IGNORE)
        try:
            ttl = durations.parse(ttl_text)
        except ValueError:
            return Decision(Action.IGNORE)
        completed_at = conditions.parse_time(complete.last_transition_time) or now
        remaining = (completed_at + datetime.timedelta(seconds=ttl) - now).total_seconds()
        return Decision(Action.EXPIRE) if remaining <= 0 else Decision(Action.WAIT_TTL, remaining)
    if running:
        return Decision(Action.IGNORE)
    progressing = conditions.find(found, conditions.PROGRESSING)
    if progressing is not None and progressing.status == "True":
        started = conditions.parse_time(progressing.last_transition_time)
        kind = update.spec.type if update.spec else None
        if kind == up_api.UP and started is not None and not deleting and has_controller:
            return Decision(Action.RESUME, resume_after=started)
        return Decision(Action.ABORT)
    if deleting or not has_controller:
        return Decision(Action.CANCEL)
    return Decision(Action.START)


@dataclasses.dataclass
class Outcome:
    """The status fields an Update ends (or pauses) with; `conditions` are (type, status, reason, message)."""

    progressing: tuple[str, str, str] = ("Unknown", "", "")
    failed: tuple[str, str, str] = ("Unknown", "", "")
    complete: tuple[str, str, str] = ("Unknown", "", "")
    message: str | None = None
    start_time: str | None = None
    end_time: str | None = None
    permalink: str | None = None
    outputs: str | None = None
    project_info: dict[str, str] | None = None
    resource_changes: dict[str, int] | None = None  # pko: from the engine's summary event, when one came
    drift: dict[str, Any] | None = None  # pko: a drift check's result (controllers/update/drift.py)
    secret: dict[str, Any] | None = None  # the outputs Secret to create before the status names it (not status)

    def conditions(self, previous: Sequence[Condition] | None, generation: int | None,
                   now: datetime.datetime) -> list[Condition]:
        result = list(previous or [])
        for type_, (status, reason, message) in ((conditions.PROGRESSING, self.progressing),
                                                 (conditions.FAILED, self.failed),
                                                 (conditions.COMPLETE, self.complete)):
            result = conditions.set_condition(
                result, type_, status, reason or "Unknown", message,  # type: ignore[arg-type]
                now=now, observed_generation=generation,
            )
        return result


def started() -> Outcome:
    return Outcome(("True", REASON_PROGRESSING, ""), ("False", REASON_PROGRESSING, ""),
                   ("False", REASON_PROGRESSING, ""))


def failed(reason: str, message: str = "") -> Outcome:
    """markFailed: the Update is over and failed for `reason` (Aborted, Canceled, ...)."""
    return Outcome(("False", REASON_FAILED, ""), ("True", reason, message), ("True", REASON_FAILED, ""),
                   message=message or None)


def waiting(reason: str, message: str) -> Outcome:
    """Not started yet, for a reason that should pass (workspace missing, not ready, unreachable)."""
    return Outcome(("False", reason, message), ("False", REASON_PROGRESSING, ""), ("False", REASON_PROGRESSING, ""))


def from_result(result: str, message: str, start: str | None, end: str | None, permalink: str | None,
                project_info: dict[str, str] | None, outputs_secret: str | None) -> Outcome:
    """The status after the agent streamed a result."""
    succeeded = result == "succeeded"
    # the message goes to status.message only; the Go operator leaves the Failed condition's message empty
    return Outcome(
        ("False", REASON_COMPLETE, ""),
        ("False", REASON_SUCCEEDED, "") if succeeded else ("True", REASON_UPDATE_FAILED, ""),
        ("True", REASON_UPDATED, ""),
        message=message, start_time=start, end_time=end, permalink=permalink, outputs=outputs_secret,
        project_info=project_info,
    )


def expects_empty(update: up_api.Update) -> bool:
    """pko (docs/ttl.md): a destroy that fails unless it leaves the stack without resources (a Stack's TTL)."""
    spec = update.spec or up_api.UpdateSpec()
    return (spec.type == up_api.DESTROY and not spec.remove
            and (update.metadata.annotations or {}).get(names.ANNOTATION_EXPECT_EMPTY) == "true")


def left_behind(outcome: Outcome, resource_count: int | None) -> Outcome:
    """A destroy that had to leave the stack empty, given how many resources the stack holds after it (None: the
    backend does not say, and the engine's success is taken as it is): failed when any remain (e.g. an
    updateTemplate made the destroy targeted), so its Stack keeps its finalizer and retries."""
    if outcome.failed[0] == "True" or not resource_count:
        return outcome
    message = (f"the destroy succeeded but {resource_count} resource{'s' if resource_count != 1 else ''} remain in "
               "the stack; a Stack's TTL removes it only once its stack is empty")
    return dataclasses.replace(
        outcome, failed=("True", REASON_RESOURCES_REMAIN, message),
        message="\n".join(filter(None, [outcome.message, message])))


def from_error(message: str | None, reason: str | None) -> Outcome:
    """The status after the agent ended the call with an error (reason: the PulumiErrorInfo reason, if any)."""
    text = message or UNKNOWN_ERROR
    return Outcome(("False", REASON_COMPLETE, ""), ("True", reason or "Unknown", text),
                   ("True", REASON_UPDATED, ""), message=text)


#: The longest message an Update's status carries: the Go agent ends a failed operation with the CLI's whole
#: output, and an object over etcd's request limit (1.5 MiB) can never be written — the result would be lost,
#: retried for ever. The head and the end are kept: the error is at the end of the CLI's output.
MAX_MESSAGE = 64 * 1024
_HEAD = 8 * 1024


def status_body(update: up_api.Update, outcome: Outcome, now: datetime.datetime) -> dict[str, Any]:
    """The status to server-side apply for `outcome` (only the fields this controller owns)."""
    previous = (update.status.conditions if update.status else None) or []
    body: dict[str, Any] = {
        "observedGeneration": update.metadata.generation or 0,
        "conditions": [c.to_wire()
                       for c in outcome.conditions(previous, update.metadata.generation, now)],
    }
    status = update.status or up_api.UpdateStatus()
    # message, permalink and outputs are always applied, empty or not, as the Go operator's apply configuration
    # does (`permalink: ""` on a self-managed backend); the times only once known (an empty time is invalid)
    body["message"] = pstatus.head_and_end(
        (outcome.message if outcome.message is not None else status.message) or "", MAX_MESSAGE, _HEAD)
    body["permalink"] = outcome.permalink or status.permalink or ""
    body["outputs"] = outcome.outputs or status.outputs or ""
    for key, value in (("startTime", outcome.start_time or status.start_time),
                       ("endTime", outcome.end_time or status.end_time)):
        if value:
            body[key] = value
    info = outcome.project_info or (status.project_info.to_wire() if status.project_info else None)
    if info:
        body["projectInfo"] = info
    changes = outcome.resource_changes if outcome.resource_changes is not None else status.resource_changes
    if changes is not None:  # pko's addition: left out when the engine sent no summary, as the Go operator
        body["resourceChanges"] = dict(changes)
    if outcome.drift is not None:
        body["drift"] = outcome.drift
    return body


def resource_changes(event: Mapping[str, Any]) -> dict[str, int] | None:
    """The engine's count of resources by operation, when `event` is its summary event (numbers arrive as floats:
    the agent protocol carries events as a protobuf Struct)."""
    summary = event.get("summaryEvent")
    if not isinstance(summary, Mapping):
        return None
    changes = summary.get("resourceChanges")
    if not isinstance(changes, Mapping):
        return {}
    return {str(op): int(count) for op, count in changes.items()
            if isinstance(count, int | float) and count >= 0}


def stack_label(update: up_api.Update) -> str:
    """The `stack` label of the Update's metrics: the Stack that owns it, else (an Update written by hand) its
    Workspace, whose name is the Stack's for the Workspaces Stacks make."""
    for ref in update.metadata.owner_references or ():
        if ref.kind == "Stack" and ref.api_version.split("/")[0] == "pulumi.com":
            return ref.name
    return (update.spec.workspace_name if update.spec else None) or ""


def event_message(outcome: Outcome, kind: str) -> str:
    """The UpdateSucceeded/UpdateFailed event of a finished operation; with the engine's change summary
    ("3 created, 1 updated, 0 deleted") when there was one: "Successfully updated the stack: <summary>",
    "Failed to update the stack (<summary>): <error>"."""
    changes = outcome.resource_changes
    summary = up_api.describe_changes(changes, planned=kind == up_api.PREVIEW) if changes is not None else None
    if outcome.failed[0] == "True":
        # the summary before the (long, truncated at 1024 characters) error text, so it always shows
        head = f"Failed to update the stack ({summary})" if summary else "Failed to update the stack"
        return f"{head}: {outcome.message or ''}"
    return f"Successfully updated the stack: {summary}" if summary else "Successfully updated the stack"




def outputs_secret(update: up_api.Update, outputs: Mapping[str, tuple[bytes, bool]]) -> dict[str, Any]:
    """The immutable `<update>-stack-outputs` Secret: JSON values by sanitised key, secret keys annotated."""
    name = update.metadata.name or ""
    data = {names.outputs_secret_key(key): base64.b64encode(value).decode() for key, (value, _) in outputs.items()}
    secret_keys = sorted(names.outputs_secret_key(key) for key, (_, secret) in outputs.items() if secret)
    return builtins.secret(
        name=names.outputs_secret_name(name), namespace=update.metadata.namespace,
        labels=names.update_component_labels(name),
        annotations={names.ANNOTATION_SECRETS: json.dumps(secret_keys, separators=(",", ":"))},
        data=data, immutable=True, type_="Opaque",
    )


DEBUG_DIAGNOSTIC_OMITTED = "(a debug diagnostic, not logged: the SDK's debug traces can hold secret values)"


def engine_log_fields(update: up_api.Update, event: Mapping[str, Any]) -> dict[str, Any]:
    """Structured log fields for one engine event of `update` (keys safe for `logging`'s `extra`).

    A ``debug`` diagnostic's text is left out: the language SDKs trace resource properties there as they serialise
    them, secrets unmasked (the Python SDK's "register resource outputs prepared: … props=…" holds a
    ``pulumi.Output.secret`` value in clear), and the operator's log must never hold a secret."""
    spec = update.spec or up_api.UpdateSpec()
    kind = next((k for k in event if k.endswith("Event")), "event")
    detail = event.get(kind)
    text = detail.get("message") if isinstance(detail, Mapping) else None
    if kind == "diagnosticEvent" and isinstance(detail, Mapping) and detail.get("severity") == "debug":
        text = DEBUG_DIAGNOSTIC_OMITTED
    return {
        "namespace": update.metadata.namespace, "stack_name": spec.stack_name, "update_name": update.metadata.name,
        "engine_event": kind, "text": str(text or "").rstrip()[:2000],
    }


@dataclasses.dataclass(frozen=True)
class PlanGate:
    """pko approvals (docs/approvals.md): a preview that saves its plan, or an `up` bound to a saved plan."""

    save_plan: bool = False
    plan_digest: str | None = None
    destroy_preview: bool = False  # destroy protection: `pulumi destroy --preview-only`


def plan_gate(annotations: Mapping[str, str], kind: str) -> PlanGate:
    """What the Update's pko annotations ask of its operation (nothing for an Update without them)."""
    if kind == up_api.PREVIEW and annotations.get(names.ANNOTATION_SAVE_PLAN) == "true":
        return PlanGate(save_plan=True)
    digest = annotations.get(names.ANNOTATION_PLAN_DIGEST)
    if kind == up_api.UP and digest:
        return PlanGate(plan_digest=digest)
    if kind == up_api.DESTROY and annotations.get(names.ANNOTATION_PREVIEW_ONLY) == "true":
        return PlanGate(destroy_preview=True)
    return PlanGate()


def supports(initial_metadata: Any, capability: str) -> bool:
    """The agent announced `capability` (a Go agent announces none)."""
    for key, value in initial_metadata or ():
        if key == CAPABILITIES_HEADER:
            text = value.decode() if isinstance(value, bytes) else str(value)
            if capability in (part.strip() for part in text.split(",")):
                return True
    return False


def supports_plans(initial_metadata: Any) -> bool:
    """The agent announced the update-plans capability (a Go agent announces none)."""
    return supports(initial_metadata, CAPABILITY_PLANS)


def planned_annotations(digest: str, changes: Mapping[str, int],
                        resources: Sequence[str] | None = None) -> dict[str, str]:
    result = {names.ANNOTATION_PLANNED_DIGEST: digest,
              names.ANNOTATION_PLANNED_CHANGES: json.dumps(dict(sorted(changes.items())), separators=(",", ":"))}
    if resources is not None:
        result[names.ANNOTATION_PLANNED_RESOURCES] = json.dumps(list(resources)[:MAX_PLANNED_RESOURCES],
                                                                separators=(",", ":"))
    return result


# --- the idle timeout (spec.idleTimeout, --update-idle-timeout) ------------------------------------------------

def _seconds(own: str | None, default: float) -> float:
    """A limit in seconds (0: none): the Update's own value, else the operator's. The API server has checked the
    format; a value it let through that does not parse counts as unset."""
    if own is not None:
        try:
            return max(durations.parse(own), 0.0)
        except ValueError:
            pass
    return max(default, 0.0)


def idle_timeout(spec: up_api.UpdateSpec, default: float) -> float:
    """Seconds the operation may go without output (0: no limit)."""
    return _seconds(spec.idle_timeout, default)


def timeout(spec: up_api.UpdateSpec, default: float) -> float:
    """pko: seconds the operation may run in all, counted from its start (0: no limit)."""
    return _seconds(spec.timeout, default)


def remaining(limit: float, started: datetime.datetime | None, now: datetime.datetime) -> float | None:
    """Seconds left before the hard deadline of an operation that started at `started` (None: no deadline; never
    below 0). An operation resumed after a restart keeps the deadline of its first start."""
    if limit <= 0:
        return None
    elapsed = (now - started).total_seconds() if started is not None else 0.0
    return max(limit - elapsed, 0.0)


def wait_limit(silence: float, left: float | None) -> tuple[float | None, bool]:
    """How long to wait for the operation's next message, and whether it is the deadline (not the silence) that
    ends that wait."""
    if left is None:
        return (silence or None), False
    if not silence or left < silence:
        return left, True
    return silence, False


def deadline_message(kind: str, seconds: float) -> str:
    return (f"the {kind or 'operation'} ran for longer than {durations.format_seconds(seconds)} and was cancelled "
            "(spec.timeout, or the operator's --update-timeout)")


def idle_message(kind: str, seconds: float) -> str:
    return (f"the {kind or 'operation'} sent no output for {durations.format_seconds(seconds)} and was cancelled "
            "(spec.idleTimeout, or the operator's --update-idle-timeout)")
