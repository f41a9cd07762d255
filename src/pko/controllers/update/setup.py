"""Wiring of the Update controller into a manager (the Go operator's ``SetupWithManager``).

An Update is reconciled when it is created, when its spec, owners, labels or annotations change, when it is being
deleted, when it becomes Complete (its TTL starts), when its operation ends without a Complete status written (the
reconciler re-queues it), and when its Workspace becomes ready or goes away — unless it is complete or its
operation is in flight. Not for the other status writes and the Stack's finalizer of every Update: those are the
reconciler's and the Stack's own, and each was a reconcile that changed nothing (2.7 of an Update's 5.7
reconciles in a 200-Stack fleet). The reference watches Updates the same way (``GenerationChanged OR ownerRefs
changed OR became Complete``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pko.api import conditions, names
from pko.controllers import connect
from pko.controllers.settings import Settings
from pko.controllers.update import reconciler as update_reconciler
from pko.kube import client as kclient
from pko.kube import events, objects, resources
from pko.runtime import controller as ctl
from pko.runtime import handlers, manager, metrics, store

UPDATE_WORKSPACE_INDEX = "index.spec.workspaceRef"


@dataclass
class UpdateController:
    """The Update controller's parts, as :func:`setup` wired them."""

    reconciler: update_reconciler.UpdateReconciler
    controller: ctl.Controller

    @property
    def running(self) -> int:
        """Pulumi operations in flight."""
        return self.reconciler.running

    async def close(self) -> None:
        await self.reconciler.close()


_WATCHED_METADATA = ("generation", "ownerReferences", "labels", "annotations", "deletionTimestamp")


def update_changed(event: store.Event) -> bool:
    """Whether an Update event asks for a reconcile: any but a change of status or finalizers only, unless the
    Update became Complete."""
    if event.type != "MODIFIED" or event.old is None:
        return True
    old, new = event.old["metadata"], event.object["metadata"]
    if any(old.get(field) != new.get(field) for field in _WATCHED_METADATA):
        return True
    return objects.condition_true(event.object, conditions.COMPLETE) and not objects.condition_true(
        event.old, conditions.COMPLETE)


def _workspace_ready_or_gone(event: store.Event) -> bool:
    if event.type == "DELETED":
        return True
    ready = objects.condition_true(event.object, conditions.READY)
    return ready and (event.old is None or not objects.condition_true(event.old, conditions.READY))


def _update_workspace(obj: objects.Object) -> list[str]:
    name = (obj.get("spec") or {}).get("workspaceName")
    return [f"{objects.namespace_of(obj)}/{name}"] if name else []


def setup(mgr: manager.Manager, client: kclient.Client, settings: Settings,
          connector: connect.Connector) -> UpdateController:
    """Register the Update controller on `mgr`."""
    reconciler = update_reconciler.UpdateReconciler(
        client, connector, events.Recorder(client, names.UPDATE_CONTROLLER),
        events.Recorder(client, names.WORKSPACE_CONTROLLER), max_operations=settings.max_operations,
        pulumi_metrics=metrics.pulumi(mgr.registry), idle_timeout=settings.update_idle_timeout,
        timeout=settings.update_timeout,
    )
    reconciler.shard = settings.shard
    mgr.on_leadership(reconciler.lead, reconciler.step_down)
    controller = mgr.controller(names.UPDATE_CONTROLLER, reconciler, workers=settings.workers)
    reconciler.enqueue = lambda key: controller.queue.add(key)
    updates = mgr.informer(resources.UPDATE, indexers={UPDATE_WORKSPACE_INDEX: _update_workspace})
    controller.watch(updates, predicate=update_changed)

    def updates_of_workspace(obj: objects.Object) -> list[objects.ObjectKey]:
        found = updates.store.by_index(UPDATE_WORKSPACE_INDEX, str(objects.key_of(obj)))
        return [objects.key_of(u) for u in found
                if not objects.condition_true(u, conditions.COMPLETE) and objects.key_of(u) not in reconciler.active]

    controller.watch(mgr.informer(resources.WORKSPACE), handlers.for_mapping(updates_of_workspace),
                     _workspace_ready_or_gone)
    return UpdateController(reconciler, controller)
