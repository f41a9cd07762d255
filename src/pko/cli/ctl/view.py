"""The pure half of `kubectl pko`: Stack summaries, tables, retry selection and describe text.

Why pure: everything a user reads is derived from objects the API server returned, so it is tested state in,
text out. The next retry time is the one pko's operator wrote (`status.nextRetryTime`, its settings applied); for a
Stack an operator without that field runs, the CLI works it out with the Stack controller's own rule
(:func:`pko.controllers.stack.sync.next_retry_at`) and the reference's defaults.

Must never: do I/O or read the clock (callers pass `now`).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import yaml

from pko.api import conditions, names
from pko.api import stack as stack_api
from pko.controllers.stack import sync
from pko.controllers.workspace import fleet

READY, STALLED, RECONCILING, SUSPENDED = "Ready", "Stalled", "Reconciling", "Suspended"


@dataclass(frozen=True)
class Row:
    """One Stack as `get` shows it (and as `-o json|yaml` prints it)."""

    namespace: str
    name: str
    state: str
    reason: str
    message: str
    last_update: str | None  # the Update's name
    last_type: str | None
    last_state: str | None
    last_time: str | None
    failures: int
    next_retry: str | None  # RFC 3339
    suspended: bool
    running: str | None  # the Update in flight
    commit: str | None
    workspace: str | None = None  # pko: its Workspace's state (`Sleeping` when scaled to zero); None: not looked at


SLEEPING = fleet.SLEEPING  # the Workspace's Ready reason while scaled to zero


def workspace_state(workspace: Mapping[str, Any] | None) -> str:
    """A Workspace in one word: `Ready`, `Sleeping` (scaled to zero), the reason it is not ready, or `-` (none)."""
    if workspace is None:
        return "-"
    ready = next((c for c in (workspace.get("status") or {}).get("conditions") or ()
                  if c.get("type") == conditions.READY), None)
    if ready is None:
        return "Pending"
    if ready.get("status") == "True":
        return SLEEPING if ready.get("reason") == SLEEPING else "Ready"
    return str(ready.get("reason") or "NotReady")


def state_of(stack: stack_api.Stack) -> tuple[str, str, str]:
    """(state, reason, message): Suspended wins (spec.suspend), then Stalled, Ready, else Reconciling."""
    found = (stack.status or stack_api.StackStatus()).conditions
    spec = stack.spec or stack_api.StackSpec(stack="")
    for type_ in (conditions.STALLED, conditions.READY, conditions.RECONCILING):
        cond = conditions.find(found, type_)
        if cond is not None and cond.status == "True":
            state, reason, message = type_, cond.reason, cond.message
            break
    else:
        state, reason, message = RECONCILING, "", ""
    if spec.suspend:
        cond = conditions.find(found, conditions.RECONCILING)
        return SUSPENDED, cond.reason if cond else "", cond.message if cond else ""
    return state, reason, message


def row_of(stack: stack_api.Stack, workspace: str | None = None) -> Row:
    """The row of `stack`; `workspace` is its Workspace's :func:`workspace_state` when the caller read it."""
    status = stack.status or stack_api.StackStatus()
    last = status.last_update
    state, reason, message = state_of(stack)
    return Row(
        namespace=stack.metadata.namespace or "", name=stack.metadata.name or "", state=state, reason=reason,
        message=message, last_update=last.name if last else None, last_type=last.type if last else None,
        last_state=last.state if last else None, last_time=last.last_resync_time if last else None,
        failures=(last.failures or 0) if last else 0,
        next_retry=next_retry(stack),
        suspended=bool(stack.spec and stack.spec.suspend),
        running=status.current_update.name if status.current_update else None,
        commit=(last.last_attempted_commit if last else None), workspace=workspace,
    )


def next_retry(stack: stack_api.Stack) -> str | None:
    """When the failed last update is retried by itself (RFC 3339), or None: the operator's own account when it
    wrote one, else the Stack controller's rule with the reference's defaults."""
    status = stack.status or stack_api.StackStatus()
    if status.next_retry_time:
        return status.next_retry_time
    if stack.spec is None:
        return None
    retry = sync.next_retry_at(stack)
    return conditions.format_time(retry) if retry is not None else None


def age(then: str | None, now: datetime.datetime) -> str:
    """kubectl's short age: 45s, 3m, 2h, 5d (negative: `in 3m`)."""
    moment = conditions.parse_time(then)
    if moment is None:
        return "-"
    seconds = int((now - moment).total_seconds())
    text = _short(abs(seconds))
    return text if seconds >= 0 else f"in {text}"


def until(then: str, now: datetime.datetime) -> str:
    """A next retry: `in 3m`, or `due` once the time has come (the operator is starting it)."""
    text = age(then, now)
    return text if text.startswith("in ") else "due"


def _short(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _cells(row: Row, now: datetime.datetime, wide: bool, all_namespaces: bool, _with_workspace: bool = False
           ) -> list[str]:
    last = f"{row.last_type or '-'}/{row.last_state or '-'} {age(row.last_time, now)}" if row.last_state else "-"
    if row.running:
        last += " (running)"
    retry = f"{row.next_retry} ({until(row.next_retry, now)})" if row.next_retry else "-"
    state = f"{row.state} (sleeping)" if row.workspace == SLEEPING else row.state
    cells = [row.name, state, last, str(row.failures), retry, "yes" if row.suspended else "no"]
    if all_namespaces:
        cells.insert(0, row.namespace)
    if wide:
        if _with_workspace:
            cells.append(row.workspace or "-")
        cells += [row.last_update or "-", (row.commit or "-")[:12], row.reason or "-", row.message or "-"]
    return cells


def table(rows: Sequence[Row], now: datetime.datetime, *, wide: bool = False, all_namespaces: bool = False) -> str:
    """The `get` table, columns aligned like kubectl's."""
    header = ["NAME", "STATE", "LAST UPDATE", "FAILURES", "NEXT RETRY", "SUSPENDED"]
    if all_namespaces:
        header.insert(0, "NAMESPACE")
    with_workspace = any(r.workspace is not None for r in rows)
    if wide:
        header += ["WORKSPACE"] if with_workspace else []
        header += ["UPDATE", "COMMIT", "REASON", "MESSAGE"]
    return render([header, *(_cells(r, now, wide, all_namespaces, with_workspace) for r in rows)])


def render(lines: Sequence[Sequence[str]]) -> str:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "".join("   ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() + "\n"
                   for line in lines)


def dump(rows: Sequence[Row], fmt: str) -> str:
    """`-o json|yaml`: `{"items": [...]}` with every field of :class:`Row`."""
    doc = {"items": [asdict(r) for r in rows]}
    if fmt == "json":
        return json.dumps(doc, indent=2) + "\n"
    return yaml.safe_dump(doc, sort_keys=False)


# --- retry -----------------------------------------------------------------------------------------------------

def needs_retry(stack: stack_api.Stack) -> bool:
    """Stalled, or backing off after a failed update: what `retry` re-requests."""
    state, _, _ = state_of(stack)
    last = (stack.status or stack_api.StackStatus()).last_update
    return state == STALLED or (last is not None and last.state == stack_api.STATE_FAILED)


def retry_plan(stacks: Iterable[stack_api.Stack], *, force: bool = False) -> list[tuple[stack_api.Stack, str]]:
    """(stack, what happens) for each Stack: `retry` annotates those with "retry requested"; a suspended Stack
    is annotated too, and told that the request waits for resume."""
    plan = []
    for stack in stacks:
        if not (force or needs_retry(stack)):
            plan.append((stack, "skipped: not Stalled or failing (--force retries it anyway)"))
        elif stack.spec is not None and stack.spec.suspend:
            plan.append((stack, "retry requested; the Stack is suspended: it runs after resume"))
        else:
            plan.append((stack, "retry requested"))
    return plan


def annotation_patch(value: str) -> dict[str, Any]:
    """What `kubectl annotate stack X pulumi.com/reconciliation-request=VALUE --overwrite` sends."""
    return {"metadata": {"annotations": {names.ANNOTATION_RECONCILE_REQUEST: value}}}


# --- describe --------------------------------------------------------------------------------------------------

def _field(out: list[str], label: str, value: Any, indent: int = 0) -> None:
    if value not in (None, "", [], {}):
        out.append(f"{' ' * indent}{label + ':':<18}{value}")


def describe(stack: stack_api.Stack, updates: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]],
             workspace: Mapping[str, Any] | None, pod: Mapping[str, Any] | None, now: datetime.datetime) -> str:
    """`describe STACK`: state, conditions, last/current update, recent Updates, events, workspace and its pod."""
    row = row_of(stack)
    status = stack.status or stack_api.StackStatus()
    out: list[str] = []
    _field(out, "Name", row.name)
    _field(out, "Namespace", row.namespace)
    _field(out, "State", f"{row.state}" + (f" ({row.reason})" if row.reason else ""))
    _field(out, "Suspended", "yes" if row.suspended else "no")
    _field(out, "Next retry", f"{row.next_retry} ({until(row.next_retry, now)})" if row.next_retry else None)
    out.append("Conditions:")
    conds = [[c.type, c.status, c.reason, age(c.last_transition_time, now), c.message]
             for c in status.conditions or ()]
    out += _indented([["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"], *conds] if conds else None)
    last = status.last_update
    out.append("Last update:")
    if last is None:
        out.append("  <none>")
    else:
        for label, value in (("Name", last.name), ("Type", last.type), ("State", last.state),
                             ("Failures", last.failures or 0), ("Time", last.last_resync_time),
                             ("Commit", last.last_attempted_commit), ("Message", last.message),
                             ("Permalink", last.permalink)):
            _field(out, label, value, 2)
    current = status.current_update
    out.append("Current update:")
    if current is None:
        out.append("  <none>")
    else:
        _field(out, "Name", current.name, 2)
        _field(out, "Commit", current.commit, 2)
    out.append("Updates:")
    rows = [[u["metadata"]["name"], (u.get("spec") or {}).get("type", "-"), update_state(u),
             age(u["metadata"].get("creationTimestamp"), now), ((u.get("status") or {}).get("message") or "")[:80]]
            for u in updates]
    out += _indented([["NAME", "TYPE", "STATE", "AGE", "MESSAGE"], *rows] if rows else None)
    out.append("Workspace:")
    out += _workspace_lines(workspace, pod, now)
    out.append("Events:")
    ev = [[e.get("type", ""), e.get("reason", ""), age(_event_time(e), now), str(e.get("count") or 1),
           e.get("message", "")] for e in events]
    out += _indented([["TYPE", "REASON", "AGE", "COUNT", "MESSAGE"], *ev] if ev else None)
    return "\n".join(out) + "\n"


def _indented(lines: Sequence[Sequence[str]] | None) -> list[str]:
    if not lines:
        return ["  <none>"]
    return ["  " + line for line in render(lines).splitlines()]


def update_state(update: Mapping[str, Any]) -> str:
    """Running, Succeeded or Failed, from the Update's conditions (as the Go operator sets them)."""
    found = {c.get("type"): c for c in (update.get("status") or {}).get("conditions") or ()}
    complete = found.get(conditions.COMPLETE, {})
    if complete.get("status") == "True":
        return "Failed" if found.get(conditions.FAILED, {}).get("status") == "True" else "Succeeded"
    return "Running" if found.get(conditions.PROGRESSING, {}).get("status") == "True" else "Pending"


def update_complete(update: Mapping[str, Any]) -> bool:
    return update_state(update) in ("Succeeded", "Failed")


def _event_time(event: Mapping[str, Any]) -> str | None:
    found = event.get("lastTimestamp") or event.get("eventTime") or (event.get("metadata") or {}).get(
        "creationTimestamp")
    return str(found) if found else None


def sorted_events(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(events, key=lambda e: _event_time(e) or "")


def _workspace_lines(workspace: Mapping[str, Any] | None, pod: Mapping[str, Any] | None,
                     now: datetime.datetime) -> list[str]:
    if workspace is None:
        return ["  <none>"]
    out: list[str] = []
    status = workspace.get("status") or {}
    _field(out, "Name", workspace["metadata"]["name"], 2)
    _field(out, "Address", status.get("address"), 2)
    ready = next((c for c in status.get("conditions") or () if c.get("type") == conditions.READY), None)
    if ready:
        _field(out, "Ready", f"{ready.get('status')} ({ready.get('reason')}) {ready.get('message', '')}".rstrip(), 2)
    if pod is None:
        _field(out, "Pod", "<none> (local runtime, or not created yet)", 2)
        return out
    pod_status = pod.get("status") or {}
    _field(out, "Pod", f"{pod['metadata']['name']} {pod_status.get('phase', '-')}", 2)
    for c in pod_status.get("containerStatuses") or ():
        state = c.get("state") or {}
        kind = next(iter(state), "-")
        detail = state.get(kind) or {}
        why = detail.get("reason") or ""
        _field(out, f"  {c.get('name')}", f"{kind}{' ' + why if why else ''}, ready={c.get('ready')}, "
                                          f"restarts={c.get('restartCount', 0)}", 2)
    return out


def log_since(update: Mapping[str, Any] | None, now: datetime.datetime) -> int | None:
    """Seconds of a workspace pod's log to read for `update` (its ``sinceSeconds``): from a moment before the
    Update was created, so the log shows this update and not the pod's earlier ones (a pod runs many: config
    changes and drift checks keep it). None, the whole log, when the Update or its time is unknown."""
    created = ((update or {}).get("metadata") or {}).get("creationTimestamp")
    if not isinstance(created, str):
        return None
    try:
        then = datetime.datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(1, int((now - then).total_seconds()) + 2)

