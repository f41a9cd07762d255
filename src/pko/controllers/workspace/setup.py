"""Wiring of the Workspace controller into a manager (the Go operator's ``SetupWithManager``).

A Workspace is reconciled when its generation changes, and when what its runtime runs changes: the ``pod``
runtime follows its StatefulSet's rollout (the reference: only when it becomes ready), the ``local`` runtime an
agent's exit. The runtime is picked by ``--workspace-runtime``. pko: a Workspace with an idle timeout
(docs/scale-to-zero.md) is also reconciled when one of its Updates is created, completes or goes away — to wake
it, or to start its idle clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pko.api import conditions, names
from pko.api import update as up_api
from pko.api import workspace as ws_api
from pko.controllers import connect
from pko.controllers.settings import Settings
from pko.controllers.workspace import fleet, local, manifests, pod, pool
from pko.controllers.workspace import reconciler as workspace_reconciler
from pko.controllers.workspace.runtime import WorkspaceRuntime
from pko.kube import client as kclient
from pko.kube import events, objects, resources
from pko.runtime import controller as ctl
from pko.runtime import handlers, manager, metrics, store
from pko.sources import githubapp

#: Updates by the Workspace they run in (`<namespace>/<workspaceName>`).
WORKSPACE_UPDATES_INDEX = "workspace.updates"
VALIDATED_KEPT = 256
"""Update models kept by uid and resourceVersion, the oldest dropped first: about 10 kB each (a fleet of 1,000 with
1,024 kept had a 12 MB higher peak), and the pool looks again and again at the Updates of its holders and of the
waiters whose Stacks made one, not at all the others."""


class ValidatedUpdates:
    """The model of each cached Update, validated once for each version of it (uid and resourceVersion), not at
    each of its Workspace's reconciles: the pool's look at a holder and at a waiter read every Update of the
    Workspace each time (1% of the operator's busy time in a 200-Stack fleet). The models are shared: read them,
    never change them."""

    def __init__(self, kept: int = VALIDATED_KEPT) -> None:
        self.kept = kept
        self._models: dict[tuple[str, str], up_api.Update] = {}

    def __call__(self, obj: objects.Object) -> up_api.Update:
        meta = obj.get("metadata") or {}
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        if not uid or not version:
            return up_api.Update.model_validate(obj)
        model = self._models.get((uid, version))
        if model is None:
            if len(self._models) >= self.kept:
                del self._models[next(iter(self._models))]
            model = self._models[(uid, version)] = up_api.Update.model_validate(obj)
        return model


def _update_workspace(obj: objects.Object) -> list[str]:
    name = (obj.get("spec") or {}).get("workspaceName")
    return [f"{objects.namespace_of(obj)}/{name}"] if name else []


def _created_completed_or_gone(event: store.Event) -> bool:
    if event.type in ("ADDED", "DELETED") or event.old is None:
        return True
    return (objects.condition_true(event.object, conditions.COMPLETE)
            != objects.condition_true(event.old, conditions.COMPLETE))


def not_for_holders(event: store.Event, keys: Iterable[objects.ObjectKey],
                    holds: Callable[[objects.ObjectKey], bool]) -> list[objects.ObjectKey]:
    """Of the Workspaces `keys` an Update `event` names, those to reconcile: all, except that a new Update does
    not wake a holder of a pool slot. A holder's reconcile would only tell the pool it is busy, and the pool asks
    it before it takes its slot anyway (it yields only after its own reconcile, which reads its Updates); a
    Workspace that sleeps or waits is not a holder, and is woken as ever. In a turning pool each Stack's Update was
    such a reconcile, with a connection to the agent."""
    if event.type == "ADDED" and not objects.condition_true(event.object, conditions.COMPLETE):
        return [key for key in keys if not holds(key)]
    return list(keys)


def running(found: store.Store) -> list[objects.ObjectKey]:
    """The Workspaces whose agent runs or is starting, as their statuses say (the pool's seed after a restart):
    placed (a Ready condition), not asleep, not queued, not deleted, not Stalled with their agent stopped."""
    keys = []
    for obj in found.list():
        ws = ws_api.Workspace.model_validate(obj)
        found_conditions = ws.status.conditions if ws.status else None
        ready = conditions.find(found_conditions, conditions.READY)
        if ws.metadata.deletion_timestamp or ready is None or ready.reason in (fleet.SLEEPING, conditions.QUEUED):
            continue  # (no Ready condition yet: never placed)
        if conditions.is_true(found_conditions, conditions.STALLED) and not (ws.status and ws.status.address):
            continue
        keys.append(objects.ObjectKey.of(ws.metadata))
    return keys


@dataclass
class WorkspaceController:
    """The Workspace controller's parts, as :func:`setup` wired them."""

    reconciler: workspace_reconciler.WorkspaceReconciler
    controller: ctl.Controller
    runtime: WorkspaceRuntime

    async def close(self) -> None:
        await self.runtime.close()


def workspace_runtime(client: kclient.Client, settings: Settings, recorder: events.Recorder) -> WorkspaceRuntime:
    """The runtime `settings` name: ``local`` (agents as child processes) or ``pod`` (StatefulSets)."""
    if settings.workspace_runtime == "local":
        command = [settings.workspace_agent] if settings.workspace_agent else None
        return local.LocalRuntime(client, settings.workspace_root, kubeconfig=settings.kubeconfig,
                                  agent_command=command, fork_agents=settings.workspace_agent_fork)
    return pod.PodRuntime(client, recorder)


def setup(mgr: manager.Manager, client: kclient.Client, settings: Settings,
          connector: connect.Connector,
          default_env: workspace_reconciler.DefaultEnv | None = None) -> WorkspaceController:
    """Register the Workspace controller on `mgr` (`default_env`: the operator's env for every workspace pod)."""
    recorder = events.Recorder(client, names.WORKSPACE_CONTROLLER)
    runtime = workspace_runtime(client, settings, recorder)
    reconciler = workspace_reconciler.WorkspaceReconciler(
        client, connector, recorder,
        manifests.AgentImage.from_settings(settings.agent_image, settings.agent_image_pull_policy, settings.version,
                                           settings.agent_image_volume),
        runtime, flux_max_untar=settings.flux_max_untar, idle_timeout=settings.workspace_idle_timeout,
        github_api_url=settings.github_api_url if settings.github_api_url != githubapp.API_URL else None,
        config_in_place=settings.config_in_place, pulumi_metrics=metrics.pulumi(mgr.registry),
        share_volume=(manifests.ShareVolume(settings.workspace_share_volume_size,
                                            settings.workspace_share_volume_storage_class)
                      if settings.workspace_share_volume_size else None),
    )
    if default_env is not None:
        reconciler.default_env = default_env
    reconciler.shard = settings.shard
    controller = mgr.controller(names.WORKSPACE_CONTROLLER, reconciler, workers=settings.workers)
    reconciler.drop_later = lambda key: controller.queue.drop_after(key)
    workspaces = mgr.informer(resources.WORKSPACE)
    if settings.max_active_workspaces is not None:
        reconciler.pool = pool.Pool(settings.max_active_workspaces, lambda key: controller.queue.add(key),
                                    seed=lambda: running(workspaces.store),
                                    wake_later=lambda key, delay: controller.queue.add_after(key, delay),
                                    defer=lambda delay, run: asyncio.get_running_loop().call_later(delay, run))
        metrics.workspace_pool(mgr.registry, reconciler.pool)
        mgr.on_leadership(reconciler.pool.reset)
    controller.watch(workspaces, predicate=handlers.generation_changed)
    runtime.watch(mgr, controller)

    updates = mgr.informer(resources.UPDATE, indexers={WORKSPACE_UPDATES_INDEX: _update_workspace})

    typed = ValidatedUpdates()

    def updates_of(key: objects.ObjectKey) -> Sequence[up_api.Update]:
        return [typed(u) for u in updates.store.by_index(WORKSPACE_UPDATES_INDEX, str(key))]

    def sleepy_workspace(obj: objects.Object) -> list[objects.ObjectKey]:
        """The Update's Workspace, when it has an idle timeout or there is a pool (no extra reconciles for the
        others)."""
        keys = [objects.ObjectKey(*k.split("/", 1)) for k in _update_workspace(obj)]
        if reconciler.pool is not None:
            return keys
        found = [workspaces.store.get(k) for k in keys]
        return [k for k, ws in zip(keys, found, strict=True)
                if ws is not None and fleet.idle_timeout(ws_api.Workspace.model_validate(ws),
                                                         settings.workspace_idle_timeout) > 0]

    reconciler.updates_of = updates_of
    sleepy = handlers.for_mapping(sleepy_workspace)

    def update_workspaces(event: store.Event) -> Iterable[objects.ObjectKey]:
        active = reconciler.pool
        return sleepy(event) if active is None else not_for_holders(event, sleepy(event), active.holds)

    controller.watch(updates, update_workspaces, _created_completed_or_gone)
    return WorkspaceController(reconciler, controller, runtime)
