"""The pure half of `kubectl pko rollout`: what a StackRollout's status reads as, and the patches its verbs send.

Why: a person steering a rollout needs, at one glance, where it is (phase and why), each wave's progress, which Stack
runs which revision and what the gates last saw; and the verbs must change only what they name (`spec.paused`,
`spec.abort`, the promote annotation), never the rollout's revision.

Must never: do I/O.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from pko.api import names
from pko.api import rollout as api
from pko.cli.ctl import view

VERBS = {
    "status": "phase, waves, Stacks and gates of a StackRollout (with --wait: until it ends; exit 1 if rolled back)",
    "pause": "set spec.paused: no further Stack starts (a wave's bake and gate checks go on)",
    "resume": "clear spec.paused",
    "promote": "go on now: end the current wave's bake, or pass its failure-rate pause",
    "abort": "set spec.abort: roll every changed Stack back to its previous revision, and stop",
}


def patch_for(verb: str, now: datetime.datetime) -> dict[str, Any]:
    """The merge patch of the StackRollout that `verb` sends."""
    if verb == "pause":
        return {"spec": {"paused": True}}
    if verb == "resume":
        return {"spec": {"paused": None}}
    if verb == "abort":
        return {"spec": {"abort": True}}
    if verb == "promote":
        return {"metadata": {"annotations": {names.ANNOTATION_ROLLOUT_PROMOTE: now.isoformat()}}}
    raise ValueError(f"unknown rollout verb {verb!r}")


def ended(rollout: Mapping[str, Any]) -> bool:
    return (rollout.get("status") or {}).get("phase") in api.TERMINAL


def status_text(obj: Mapping[str, Any], events: Iterable[Mapping[str, Any]] = ()) -> str:
    """A StackRollout as `kubectl pko rollout status` prints it."""
    rollout = api.StackRollout.model_validate(obj)
    status = rollout.status or api.StackRolloutStatus()
    meta = rollout.metadata
    lines = [f"StackRollout {meta.namespace}/{meta.name}: {status.phase or 'Pending'}"]
    if status.message:
        lines.append(f"  {status.message}")
    if rollout.spec is not None and rollout.spec.paused:
        lines.append("  spec.paused is set (kubectl pko rollout resume)")
    if status.waves:
        rows = [["WAVE", "PHASE", "STACKS", "SUCCEEDED", "FAILED"]]
        for index, step in enumerate(status.waves):
            marker = "*" if index == status.current_wave and status.phase not in api.TERMINAL else " "
            rows.append([f"{marker}{step.name}", step.phase, str(step.stacks or 0), str(step.succeeded or 0),
                         str(step.failed or 0)])
        lines.append("")
        lines.extend(view.render(rows).rstrip("\n").split("\n"))
    if status.stacks:
        rows = [["STACK", "WAVE", "STATE", "MESSAGE"]]
        waves = status.waves or []
        for entry in status.stacks:
            wave = waves[entry.wave].name if entry.wave < len(waves) else str(entry.wave)
            rows.append([entry.name, wave, entry.state, entry.message or ""])
        lines.append("")
        lines.extend(view.render(rows).rstrip("\n").split("\n"))
    if status.unassigned:
        lines.append(f"{status.unassigned} selected Stacks are in no wave (left alone)")
    if status.gates:
        rows = [["GATE", "RESULT", "FAILURES", "MESSAGE"]]
        rows.extend([g.name, g.result, str(g.failures or 0), g.message or ""] for g in status.gates)
        lines.append("")
        lines.extend(view.render(rows).rstrip("\n").split("\n"))
    shown = view.sorted_events([dict(e) for e in events])[-10:]
    if shown:
        lines.append("")
        lines.extend(f"event {e.get('type', '')} {e.get('reason', '')}: {e.get('message', '')}" for e in shown)
    return "\n".join(lines) + "\n"
