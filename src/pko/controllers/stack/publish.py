"""The executor of `spec.outputs`: writes what :mod:`pko.controllers.stack.outputs` plans, and reports.

Why a module of its own: the reconciler calls it once, after absorbing a successful `up`, and gets back the Stack's
conditions with `OutputsPublished` set; everything about reading, the ownership check and writing stays here.
Writes are a create, or a PUT at the resourceVersion that was checked (so an object someone else took over
meanwhile is never overwritten: the write fails with a Conflict and is reported). Problems become
`OutputsPublished=False` with a Warning event `OutputsNotPublished`; the update itself stays a success.

Must never: write into an object the Stack does not control, or put an output's value into a message, an event or
a log line.
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from pko.api import stack as stack_api
from pko.api.meta import Condition
from pko.controllers.stack import outputs
from pko.kube import client as kclient
from pko.kube import errors, events, objects, resources


async def publish(client: kclient.Client, recorder: events.Recorder, stack: stack_api.Stack, update_name: str,
                  values: Mapping[str, Any] | None, secret_outputs: Collection[str], found: Sequence[Condition] | None,
                  now: datetime.datetime) -> list[Condition]:
    """Publish the outputs of the successful Update `update_name` as the Stack's `spec.outputs` asks; the
    conditions after it (without `OutputsPublished` when the Stack asks for nothing). `values` None: the Update's
    outputs could not be read, and nothing is written (an empty publication would erase the last one)."""
    spec = stack_api.spec_of(stack).outputs
    if spec is None:
        return outputs.clear(found)
    namespace = stack.metadata.namespace or ""

    async def refuse(reason: str, message: str) -> list[Condition]:
        await recorder.warning(stack, outputs.EVENT_NOT_PUBLISHED, f"Outputs not published: {message}")
        return outputs.mark(found, False, reason, message, now=now)

    if values is None:
        return await refuse(outputs.REASON_OUTPUTS_UNAVAILABLE,
                            f"the outputs Secret of Update {update_name} is gone; nothing was published")
    result = outputs.plan(spec, values, secret_outputs)
    if not result.ok:
        return await refuse(result.reason, "; ".join(result.problems))
    wanted: list[tuple[resources.Kind, str, str, dict[str, str]]] = []
    if spec.secret_name and result.secret is not None:
        wanted.append((resources.SECRET, spec.secret_name, "secretName", result.secret))
    if spec.config_map_name and result.config_map is not None:
        wanted.append((resources.CONFIG_MAP, spec.config_map_name, "configMapName", result.config_map))

    existing: list[objects.Object | None] = []
    for kind, name, field, _ in wanted:
        try:
            current = await client.get_or_none(kind, name, namespace)
        except errors.ApiError as err:  # never a failed reconcile: the update's result must still be recorded
            return await refuse(outputs.REASON_WRITE_FAILED, f"could not read {kind.kind} {name}: {err.message}")
        if current is not None and outputs.foreign(current, stack):
            return await refuse(outputs.REASON_NAME_CONFLICT,
                                f"{kind.kind} {name} already exists and is not owned by this Stack; it is never "
                                f"overwritten: choose another spec.outputs.{field} or remove that {kind.kind}")
        existing.append(current)
    for (kind, name, _, data), current in zip(wanted, existing, strict=True):
        want = outputs.desired(kind, name, data, stack, update_name)
        try:
            if current is None:
                await client.create(want)
            else:
                await client.replace(outputs.replacement(current, want))
        except errors.ApiError as err:
            return await refuse(outputs.REASON_WRITE_FAILED, f"could not write {kind.kind} {name}: {err.message}")
    return outputs.mark(found, True, outputs.REASON_PUBLISHED, outputs.published_message(spec, result), now=now)
