"""What a StackRollout changes on one Stack, and what undoes it — pure.

Why: a rollout moves a Stack by a JSON merge patch of its ``spec`` (commit or branch, programRef, config keys), and
rolls it back by the merge patch that restores exactly the fields it touched as they were (a field that was absent
is removed again; config keys it did not touch stay as the user left them). The undo patch is computed before the
change and kept in the rollout's status, so a rollback after an operator restart restores the same values.

Must never: touch a field the revision does not name, or do I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pko.api import rollout


@dataclass(frozen=True)
class Change:
    """The merge patch of ``spec`` that moves a Stack, and the one that undoes it."""

    forward: dict[str, Any]
    undo: dict[str, Any]


def merged(target: Any, patch: Any) -> Any:
    """`target` with the JSON merge patch `patch` applied (RFC 7386), as the API server applies it; a new value."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merged(result.get(key), value)
    return result


def replacing(old: Any, new: Any) -> Any:
    """The merge patch that turns the value `old` into exactly `new` (a plain merge would keep keys of `old` that
    `new` lacks: they are nulled)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        patch = {key: replacing(old.get(key), value) for key, value in new.items()}
        patch.update({key: None for key in old if key not in new})
        return patch
    return copy.deepcopy(new)


def change(revision: rollout.RolloutRevision, spec: Mapping[str, Any]) -> Change:
    """The change `revision` makes to a Stack whose spec is `spec` (wire form)."""
    forward: dict[str, Any] = {}
    undo: dict[str, Any] = {}

    def put(field: str, value: Any) -> None:
        old = spec.get(field)
        forward[field] = None if value is None else replacing(old, value)
        undo[field] = None if old is None else replacing(value, old)

    if revision.commit is not None:
        put("commit", revision.commit)
        put("branch", None)
    if revision.branch is not None:
        put("branch", revision.branch)
        put("commit", None)
    if revision.program_ref is not None:
        put("programRef", revision.program_ref.to_wire())
    if revision.config:
        current = spec.get("config")
        current = current if isinstance(current, Mapping) else {}
        forward["config"], undo["config"] = {}, {}
        for key, value in revision.config.items():
            old = current.get(key)
            forward["config"][key] = None if value is None else replacing(old, value)
            undo["config"][key] = None if old is None else replacing(value, old)
    return Change(forward, undo)


def at(patch: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    """Whether `spec` already holds what the merge patch `patch` sets (applying it would change nothing)."""
    return bool(merged(spec, patch) == spec)


def summary(revision: rollout.RolloutRevision) -> str:
    """The revision in a few words, for events and status ("commit 0123456789ab; config version"): config keys
    only, never their values."""
    parts = []
    if revision.commit:
        parts.append(f"commit {revision.commit[:12]}")
    if revision.branch:
        parts.append(f"branch {revision.branch}")
    if revision.program_ref is not None:
        parts.append(f"program {revision.program_ref.name}")
    if revision.config:
        parts.append(f"config {', '.join(sorted(revision.config))}")
    return "; ".join(parts)
