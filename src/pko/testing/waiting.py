"""Waiting in tests and `pko dev`: poll until a condition holds, and fail saying what was left.

Polling (rather than watching) keeps these helpers independent of the runtime under test; a failure message
always carries the object's last status (plus any extra diagnostics) so a red test says what state things were
left in. To show that something did *not* happen, wait for the event after which it would have (the operator
wrote a status, a controller finished its reconciles: :func:`settled`), never for a fixed time; that a retry
will not come is what the controller scheduled (:func:`next_look`), not a wait longer than the retry's delay.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CollectorRegistry

from pko.kube import client as kclient
from pko.kube import objects, resources
from pko.runtime import controller as ctl

Object = dict[str, Any]


def condition(obj: Object | None, type_: str) -> Object:
    """The condition of `type_` on `obj` ({} when absent, or when there is no object)."""
    return objects.condition(obj or {}, type_)


def at_round(obj: Object, round_: int, output: str = "round") -> bool:
    """The fault tests' Stack has converged on round `round_`: Ready, its status and last Update at its current
    generation, and the output `output` (which the program copies from the Stack's `round` config) is `round_`."""
    status = obj.get("status") or {}
    return (condition(obj, "Ready").get("status") == "True"
            and status.get("observedGeneration") == obj["metadata"]["generation"]
            and (status.get("lastUpdate") or {}).get("generation") == obj["metadata"]["generation"]
            and str((status.get("outputs") or {}).get(output)) == str(round_))


async def eventually(condition: Callable[[], bool | Awaitable[bool]], what: str, timeout: float = 60.0,
                     interval: float = 0.05) -> None:
    """Poll `condition` (plain or async) until it holds; AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        outcome = condition()
        if not isinstance(outcome, bool):
            outcome = await outcome
        if outcome:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


async def wait_for(client: kclient.Client, kind: resources.Kind, name: str, namespace: str,
                   test: Callable[[Object], bool], timeout: float = 300.0,
                   seen: Callable[[Object], None] | None = None, diagnostics: Callable[[], str] | None = None,
                   interval: float = 0.5) -> Object:
    """Poll until `test(obj)` holds; `seen` gets every observed version (to record what went by), `diagnostics`
    adds to the failure message (e.g. another process's log)."""
    deadline = time.monotonic() + timeout
    obj: Object | None = None
    while time.monotonic() < deadline:
        obj = await client.get_or_none(kind, name, namespace)
        if obj is not None:
            if seen is not None:
                seen(obj)
            if test(obj):
                return obj
        await asyncio.sleep(interval)
    raise AssertionError(f"{kind.kind} {namespace}/{name} not there after {timeout:.0f}s; status: "
                         f"{json.dumps((obj or {}).get('status'), indent=1)}"
                         + (f"\n{diagnostics()}" if diagnostics is not None else ""))


def reconciles(registry: CollectorRegistry, controller: str) -> float:
    """How many reconciles `controller` has finished (``controller_runtime_reconcile_total``, all results)."""
    total = 0.0
    for metric in registry.collect():
        if metric.name == "controller_runtime_reconcile":
            total += sum(s.value for s in metric.samples
                         if s.name.endswith("_total") and s.labels.get("controller") == controller)
    return total


def idle(registry: CollectorRegistry, controller: str) -> bool:
    """Whether `controller` has no reconcile running and nothing queued (delayed requeues aside)."""
    labels = {"controller": controller}
    active = registry.get_sample_value("controller_runtime_active_workers", labels) or 0.0
    depth = registry.get_sample_value("workqueue_depth", {**labels, "name": controller}) or 0.0
    return active == 0 and depth == 0


async def settled(registry: CollectorRegistry, controller: str, *, after: float, timeout: float = 60.0) -> None:
    """Wait until `controller` has finished more than `after` reconciles and is :func:`idle`: whatever a reconcile
    started before this call was going to do, it has done."""
    labels = {"controller": controller}
    try:
        await eventually(lambda: reconciles(registry, controller) > after and idle(registry, controller),
                         f"{controller} to finish a reconcile and go idle", timeout)
    except AssertionError as err:
        active = registry.get_sample_value("controller_runtime_active_workers", labels)
        depth = registry.get_sample_value("workqueue_depth", {**labels, "name": controller})
        raise AssertionError(f"{err} (reconciles {reconciles(registry, controller)} after {after}, "
                             f"active {active}, queued {depth})") from None


def next_look(controller: ctl.Controller, key: objects.ObjectKey) -> float | None:
    """Seconds until `controller` looks at `key` again by itself (a requeue a reconcile asked for), or None when
    nothing is scheduled: only events bring it back. Call it in the loop the controller runs in."""
    at = controller.queue.pending_after(key)
    return None if at is None else at - asyncio.get_running_loop().time()


async def wait_gone(client: kclient.Client, kind: resources.Kind, name: str, namespace: str,
                    timeout: float = 300.0) -> None:
    """Poll until the object no longer exists."""
    deadline = time.monotonic() + timeout
    obj: Object | None = None
    while time.monotonic() < deadline:
        obj = await client.get_or_none(kind, name, namespace)
        if obj is None:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"{kind.kind} {namespace}/{name} still there after {timeout:.0f}s; status: "
                         f"{json.dumps(obj.get('status') if obj else None, indent=1)}")
