"""The Program controller's decision: which ``status`` a Program should have, as a pure function.

Why: a Program's status is a Flux-compatible artifact record — ``observedGeneration`` plus ``artifact{path, url,
revision, digest, lastUpdateTime, size}`` — that Stacks follow (a new revision or digest makes them fetch the
program again). The Go operator rewrites it on every reconcile; we write it only when something in it would
change (a new generation, another advertised address, different bytes), so an operator restart does not touch
every Program and wake every Stack that uses one.

Pure: a Program (its typed model), the advertised address and the time in; the status to apply (or nothing) out. Must
never do I/O or read the clock.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from pko.api import program as program_api
from pko.kube import objects
from pko.sources import program as artifacts

ROUTE_PREFIX = "/programs/"
COMPARED = ("path", "url", "revision", "digest", "size")
"""Artifact fields that decide whether a status write is needed (``lastUpdateTime`` records when they changed)."""


def artifact_path(namespace: str, name: str, generation: int) -> str:
    return f"programs/{namespace}/{name}/{generation}.tar.gz"


def artifact_url(advertised: str, namespace: str, name: str, generation: int) -> str:
    """``http://<advertised>/programs/<ns>/<name>/<gen>`` (an advertised ``http(s)://`` URL base is kept)."""
    base = advertised if advertised.startswith(("http://", "https://")) else f"http://{advertised}"
    return f"{base.rstrip('/')}{ROUTE_PREFIX}{namespace}/{name}/{generation}"


def format_time(now: datetime.datetime) -> str:
    """``metav1.Time`` on the wire: RFC 3339 in UTC, whole seconds."""
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(frozen=True)
class StatusPlan:
    """``status`` is the whole status to apply, or ``None`` when the current one is already right."""

    status: dict[str, Any] | None
    artifact: artifacts.Artifact


def desired_artifact(program: program_api.Program, built: artifacts.Artifact, advertised: str,
                     now: datetime.datetime) -> dict[str, Any]:
    namespace = program.metadata.namespace or ""
    name = program.metadata.name or ""
    generation = program.metadata.generation or 0
    return {
        "path": artifact_path(namespace, name, generation),
        "url": artifact_url(advertised, namespace, name, generation),
        "revision": str(generation),
        "digest": built.digest,
        "lastUpdateTime": format_time(now),
        "size": built.size,
    }


def plan(program: program_api.Program, *, advertised: str, now: datetime.datetime) -> StatusPlan:
    """The status a Program should have."""
    built = artifacts.build(program)
    generation = program.metadata.generation or 0
    artifact = desired_artifact(program, built, advertised, now)
    current = program.status or program_api.ProgramStatus()
    if current.observed_generation == generation and current.artifact is not None and all(
        getattr(current.artifact, field) == artifact[field] for field in COMPARED
    ):
        return StatusPlan(None, built)
    return StatusPlan({"observedGeneration": generation, "artifact": artifact}, built)


def status_apply(program: program_api.Program, status: dict[str, Any]) -> dict[str, Any]:
    """The server-side apply request for a Program's status subresource."""
    return objects.status_apply(program_api.API_VERSION, program_api.KIND, objects.ObjectKey.of(program.metadata),
                                status)
