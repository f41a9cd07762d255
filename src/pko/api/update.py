"""The Update kind (``auto.pulumi.com/v1alpha1``): one Pulumi operation (preview/up/destroy/refresh) on a stack.

Why: the Stack controller records each operation it wants as an Update; the Update controller runs it through
the workspace agent and reports times, permalink, outputs Secret and conditions. ``type`` is deliberately a
plain string in the CRD (the Go operator has no enum there).

pko adds ``spec.idleTimeout`` (the reference's name, from its PR#1296: how long the operation may stay silent before
it is cancelled; absent, the operator's ``--update-idle-timeout``) and ``status.drift`` (the resources a drift
check's preview would change), written only on the Updates the Stack controller labels ``pulumi.com/drift-check``,
so an Update of the Go operator's reads and looks the same.

Must never: validate ``type`` more strictly than the CRD does.
"""

from __future__ import annotations

from typing import Annotated, Literal

import pydantic

from pko.api.meta import Conditions, Int32, ObjectMeta, Time, Wire
from pko.api.schema import MaxLength, Minimum, Rule
from pko.api.workspace import DURATION_RULE, ProjectInfo

GROUP = "auto.pulumi.com"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "Update"
PLURAL = "updates"

UpdateType = Literal["preview", "up", "destroy", "refresh"]
PREVIEW: UpdateType = "preview"
UP: UpdateType = "up"
DESTROY: UpdateType = "destroy"
REFRESH: UpdateType = "refresh"


IdleTimeout = Annotated[str, MaxLength(64), Rule(
    DURATION_RULE, "idleTimeout must be a duration such as 30m, 2h or 90s (0s: the operation may stay silent "
                   "for ever)")]
Timeout = Annotated[str, MaxLength(64), Rule(
    DURATION_RULE, "timeout must be a duration such as 6h, 90m or 1h30m (0s: the operation may run for ever)")]


class UpdateSpec(Wire):
    """The desired state of an Update."""

    workspace_name: str | None = pydantic.Field(None, description="The workspace to run the operation in.")
    stack_name: str | None = pydantic.Field(None, description="The Pulumi stack to select.")
    type: str | None = pydantic.Field(None, description="preview, up, destroy or refresh.")
    ttl_after_completed: str | None = pydantic.Field(None, description="How long a completed Update is kept.")
    parallel: Int32 | None = None
    message: str | None = None
    expect_no_changes: bool | None = None
    replace: list[str] | None = None
    target: list[str] | None = None
    target_dependents: bool | None = None
    refresh: bool | None = None
    continue_on_error: bool | None = None
    remove: bool | None = None
    run_program: bool | None = None
    # pko (the reference's PR#1296 name): absent, the operator's --update-idle-timeout.
    idle_timeout: IdleTimeout | None = pydantic.Field(
        None, description="How long the operation may go without output before it is cancelled and the Update "
                          "fails (a Go duration; 0s: no limit). Default: the operator's --update-idle-timeout.")
    # pko: the hard deadline beside the idle timeout; absent, the operator's --update-timeout.
    timeout: Timeout | None = pydantic.Field(
        None, description="How long the operation may run in all, output or not, before it is cancelled and the "
                          "Update fails (a Go duration; 0s: no limit). Default: the operator's --update-timeout.")


# pko: drift checks (docs/drift-detection.md). The Stack controller labels the `preview --refresh` Updates it runs to
# look for drift; for those (and only those) the Update controller writes `status.drift`.
LABEL_DRIFT_CHECK = "pulumi.com/drift-check"
MAX_DRIFTED_RESOURCES = 100


class DriftedResource(Wire):
    """pko: one resource a drift check found changed outside Pulumi, and what an update would do to it."""

    urn: str | None = None
    op: str | None = pydantic.Field(None, description="create, update, delete or replace.")


class UpdateDrift(Wire):
    """pko: what the `preview --refresh` of a drift check would change (written only on drift-check Updates)."""

    resources: list[DriftedResource] | None = pydantic.Field(
        None, description=f"The changed resources by URN (at most {MAX_DRIFTED_RESOURCES}).")
    changes: dict[str, int] | None = pydantic.Field(
        None, description="How many resources each operation would touch (all of them, not only those listed).")


class UpdateStatus(Wire):
    """The observed state of an Update."""

    observed_generation: Annotated[int, Minimum(0)] | None = None
    start_time: Time | None = None
    end_time: Time | None = None
    permalink: str | None = None
    message: str | None = None
    outputs: str | None = pydantic.Field(None, description="Name of the Secret holding the stack outputs.")
    conditions: Conditions | None = None
    project_info: ProjectInfo | None = None
    # pko addition (docs/metrics.md): absent when the engine reported no summary (the Go operator never writes it)
    resource_changes: dict[str, Annotated[int, Minimum(0)]] | None = pydantic.Field(
        None, description="pko: resources the operation changed, by operation (create, update, delete, replace, "
                          "same, ...), from the engine's summary event; for a preview, the changes it plans.")
    drift: UpdateDrift | None = None


class Update(Wire):
    """An Update object."""

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: ObjectMeta = pydantic.Field(default_factory=ObjectMeta)
    spec: UpdateSpec | None = None
    status: UpdateStatus | None = None


#: The resource operations an update's change summary names (the engine's op names); others (same, read, ...) are
#: in ``status.resourceChanges`` but not in the one-line summary.
SUMMARY_OPS = ("create", "update", "delete", "replace")
_DONE = {"create": "created", "update": "updated", "delete": "deleted", "replace": "replaced"}


def describe_changes(changes: dict[str, int], *, planned: bool = False) -> str:
    """``3 created, 1 updated, 0 deleted`` (``, 1 replaced`` when there were replacements) for the event of a
    finished update; a preview's planned changes read ``3 to create, 1 to update, 0 to delete``."""
    parts = []
    for op in SUMMARY_OPS:
        count = changes.get(op, 0)
        if op == "replace" and not count:
            continue
        parts.append(f"{count} to {op}" if planned else f"{count} {_DONE[op]}")
    return ", ".join(parts)
