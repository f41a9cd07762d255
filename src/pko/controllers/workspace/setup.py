"""Wiring of the Workspace controller into a manager (the Go operator's ``SetupWithManager``).

A Workspace is reconciled when its generation changes, and when what its runtime runs changes: the ``pod``
runtime follows its StatefulSet's rollout (the reference: only when it becomes ready), the ``local`` runtime an
agent's exit. The runtime is picked by ``--workspace-runtime``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pko.api import names
from pko.controllers import connect
from pko.controllers.settings import Settings
from pko.controllers.workspace import local, manifests, pod
from pko.controllers.workspace import reconciler as workspace_reconciler
from pko.controllers.workspace.runtime import WorkspaceRuntime
from pko.kube import client as kclient
from pko.kube import events, resources
from pko.runtime import controller as ctl
from pko.runtime import handlers, manager, metrics


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
                                  agent_command=command)
    return pod.PodRuntime(client, recorder)


def setup(mgr: manager.Manager, client: kclient.Client, settings: Settings,
          connector: connect.Connector) -> WorkspaceController:
    """Register the Workspace controller on `mgr`."""
    recorder = events.Recorder(client, names.WORKSPACE_CONTROLLER)
    runtime = workspace_runtime(client, settings, recorder)
    reconciler = workspace_reconciler.WorkspaceReconciler(
        client, connector, recorder,
        manifests.AgentImage.from_settings(settings.agent_image, settings.agent_image_pull_policy, settings.version),
        runtime, flux_max_untar=settings.flux_max_untar, pulumi_metrics=metrics.pulumi(mgr.registry),
    )
    controller = mgr.controller(names.WORKSPACE_CONTROLLER, reconciler, workers=settings.workers)
    controller.watch(mgr.informer(resources.WORKSPACE), predicate=handlers.generation_changed)
    runtime.watch(mgr, controller)
    return WorkspaceController(reconciler, controller, runtime)
