"""Wiring of the `auto.pulumi.com` controllers (Workspace, Update) into a manager: watches, predicates, indexes.

Mirrors the Go operator's `SetupWithManager`: a Workspace is reconciled when its generation changes or its
StatefulSet's rollout moves (the reference: only when it becomes ready); an Update when it changes, and when its
Workspace becomes ready or goes away.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pko.api import conditions, names
from pko.controllers import connect
from pko.controllers.update import reconciler as update_reconciler
from pko.controllers.workspace import local, manifests
from pko.controllers.workspace import reconciler as workspace_reconciler
from pko.kube import client as kclient
from pko.kube import events, objects, resources
from pko.runtime import handlers, manager, store

UPDATE_WORKSPACE_INDEX = "index.spec.workspaceRef"
Runtime = Literal["pod", "local"]


@dataclass
class Settings:
    """The operator's settings (flags and environment of `pko operator`) that controllers need."""

    version: str
    workspace_runtime: Runtime = "pod"
    workspace_root: Path = field(default_factory=lambda: Path.cwd() / ".pko" / "workspaces")
    kubeconfig: str | None = None  # handed to local agents for their TokenReviews
    agent_image: str | None = None
    agent_image_pull_policy: str | None = None
    flux_max_untar: str | None = None
    workers: int = 25
    max_operations: int = update_reconciler.DEFAULT_MAX_OPERATIONS
    operator_namespace: str | None = None
    operator_service_account: str | None = None
    workspace_localhost: str | None = None
    program_fs_addr: str | None = None  # the Program file server (see pko.controllers.program)
    program_fs_adv_addr: str | None = None
    retry_max_backoff: float | None = None  # seconds; operator-wide cap of the failed-update backoff (default 24h)


@dataclass
class AutoControllers:
    workspaces: workspace_reconciler.WorkspaceReconciler
    updates: update_reconciler.UpdateReconciler
    local_runtime: local.LocalRuntime | None

    async def close(self) -> None:
        await self.updates.close()
        if self.local_runtime is not None:
            await self.local_runtime.close()


def _statefulset_ready(obj: objects.Object) -> bool:
    status = obj.get("status") or {}
    return (status.get("observedGeneration") == objects.generation_of(obj)
            and status.get("updateRevision") == status.get("currentRevision")
            and (status.get("availableReplicas") or 0) >= 1)


def _rollout(obj: objects.Object) -> tuple[object, ...]:
    status = obj.get("status") or {}
    return (status.get("observedGeneration"), status.get("updateRevision"), status.get("currentRevision"),
            status.get("availableReplicas"))


def _rollout_changed(event: store.Event) -> bool:
    """The reference reconciles only when the StatefulSet becomes ready; we also follow the rollout's progress,
    so the Workspace's Ready reason moves from RollingUpdate to WaitingForReplicas instead of going stale."""
    if event.type == "DELETED":
        return False
    if _statefulset_ready(event.object) and (event.old is None or not _statefulset_ready(event.old)):
        return True
    return event.old is not None and _rollout(event.old) != _rollout(event.object)


def _workspace_ready_or_gone(event: store.Event) -> bool:
    if event.type == "DELETED":
        return True
    ready = objects.condition_true(event.object, conditions.READY)
    return ready and (event.old is None or not objects.condition_true(event.old, conditions.READY))


def _update_workspace(obj: objects.Object) -> list[str]:
    name = (obj.get("spec") or {}).get("workspaceName")
    return [f"{objects.namespace_of(obj)}/{name}"] if name else []


def setup(mgr: manager.Manager, client: kclient.Client, settings: Settings) -> AutoControllers:
    """Register the Workspace and Update controllers on `mgr`."""
    connector = connect.Connector(client, namespace=settings.operator_namespace,
                                  service_account=settings.operator_service_account,
                                  localhost_override=settings.workspace_localhost)
    workspace_events = events.Recorder(client, names.WORKSPACE_CONTROLLER)
    local_runtime = None
    if settings.workspace_runtime == "local":
        local_runtime = local.LocalRuntime(client, settings.workspace_root, kubeconfig=settings.kubeconfig)
    workspaces = workspace_reconciler.WorkspaceReconciler(
        client, connector, workspace_events,
        manifests.AgentImage.from_settings(settings.agent_image, settings.agent_image_pull_policy, settings.version),
        local_runtime=local_runtime, flux_max_untar=settings.flux_max_untar,
    )
    workspace_controller = mgr.controller(names.WORKSPACE_CONTROLLER, workspaces, workers=settings.workers)
    workspace_informer = mgr.informer(resources.WORKSPACE)
    workspace_controller.watch(workspace_informer, predicate=handlers.generation_changed)
    if local_runtime is None:
        workspace_controller.watch(mgr.informer(resources.STATEFUL_SET),
                                   handlers.for_controller(resources.WORKSPACE), _rollout_changed)
    else:
        local_runtime.on_exit = lambda key: workspace_controller.queue.add(key)

    updates = update_reconciler.UpdateReconciler(
        client, connector, events.Recorder(client, names.UPDATE_CONTROLLER), workspace_events,
        max_operations=settings.max_operations,
    )
    update_controller = mgr.controller(names.UPDATE_CONTROLLER, updates, workers=settings.workers)
    updates.enqueue = lambda key: update_controller.queue.add(key)
    update_informer = mgr.informer(resources.UPDATE, indexers={UPDATE_WORKSPACE_INDEX: _update_workspace})
    update_controller.watch(update_informer)

    def updates_of_workspace(obj: objects.Object) -> list[objects.ObjectKey]:
        found = update_informer.store.by_index(UPDATE_WORKSPACE_INDEX, str(objects.key_of(obj)))
        return [objects.key_of(u) for u in found
                if not objects.condition_true(u, conditions.COMPLETE) and objects.key_of(u) not in updates.active]

    update_controller.watch(workspace_informer, handlers.for_mapping(updates_of_workspace), _workspace_ready_or_gone)
    return AutoControllers(workspaces, updates, local_runtime)
