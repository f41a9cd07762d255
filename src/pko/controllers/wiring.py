"""All of the operator's controllers on one manager: the one place `pko operator`, `pko dev` and tests wire them.

Each controller wires itself next to its reconciler (``<controller>.setup``, the Go operator's
``SetupWithManager``) from the one :class:`~pko.controllers.settings.Settings`; this module only calls them in
turn and shares what they share (the connector to workspace agents). Controllers run only while the manager
leads; the Program file server runs on every replica.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from pko.controllers import connect
from pko.controllers.program import controller as program_controller
from pko.controllers.program import fileserver
from pko.controllers.rollout import setup as rollout_setup
from pko.controllers.settings import Settings
from pko.controllers.stack import setup as stack_setup
from pko.controllers.update import setup as update_setup
from pko.controllers.workspace import local, reconciler
from pko.controllers.workspace import setup as workspace_setup
from pko.depcache import routes
from pko.depcache.server import DependencyCache
from pko.depcache.store import Store
from pko.kube import client as kclient
from pko.kube import resources
from pko.runtime import cachedclient, manager, sharding


@dataclass
class Controllers:
    manager: manager.Manager
    stacks: stack_setup.StackController
    workspaces: workspace_setup.WorkspaceController
    updates: update_setup.UpdateController
    programs: program_controller.Programs
    rollouts: rollout_setup.RolloutController | None = None
    connector: connect.Connector | None = None  # the agents' channels, closed last

    @property
    def local_runtime(self) -> local.LocalRuntime | None:
        """The ``local`` workspace runtime, when it is the one in use."""
        runtime = self.workspaces.runtime
        return runtime if isinstance(runtime, local.LocalRuntime) else None

    async def run(self) -> None:
        """Run the manager and the file server until cancelled, then stop in-flight work."""
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.manager.run(), name="manager")
                group.create_task(self.programs.serve(), name="program-file-server")
        finally:
            await self.close()

    async def close(self) -> None:
        if self.rollouts is not None:
            await self.rollouts.close()
        await self.stacks.close()
        await self.updates.close()
        await self.workspaces.close()
        if self.connector is not None:
            await self.connector.close()


def dependency_cache(settings: Settings, server: fileserver.FileServer, registry: CollectorRegistry,
                     ) -> reconciler.DefaultEnv | None:
    """Put the dependency cache on the file server when `settings` give it upstreams; the environment that points
    workspaces at it (None: no cache)."""
    if not settings.dependency_cache_upstreams:
        return None
    upstreams = settings.dependency_cache_upstreams

    async def base() -> str:
        return routes.cache_base(await server.advertised())

    server.cache = DependencyCache(
        Store(settings.dependency_cache_dir, settings.dependency_cache_size), upstreams, base,
        index_ttl=settings.dependency_cache_index_ttl, registry=registry, user_agent=f"pko/{settings.version}")

    async def env() -> Mapping[str, str]:
        return routes.pod_env(await base(), tuple(upstreams))
    return env


#: The kinds a shard owns, whose watches the API server filters by the shard's selector (pko.runtime.sharding);
#: Programs are read by every shard and filtered in their controller.
SHARDED_KINDS = (resources.STACK, resources.WORKSPACE, resources.UPDATE, resources.STACK_ROLLOUT)


def setup(mgr: manager.Manager, client: kclient.Client, settings: Settings) -> Controllers:
    shard = settings.shard
    for kind in SHARDED_KINDS:
        mgr.select(kind, shard.text)
    # the pod runtime's StatefulSets: its own shard's workspace pods only, not every StatefulSet of the cluster
    mgr.select(resources.STATEFUL_SET, sharding.statefulset_selector(shard))
    live = client  # pko rollouts list Stacks of every shard
    # the controllers read through the manager's informer caches, never older than what they wrote themselves
    client = cachedclient.CachedClient(client, mgr.informers.get)
    connector = connect.Connector(client, namespace=settings.operator_namespace,
                                  service_account=settings.operator_service_account,
                                  localhost_override=settings.workspace_localhost)
    programs = program_controller.setup(mgr, client, listen=settings.program_fs_addr,
                                        advertised=settings.program_fs_adv_addr, workers=settings.workers,
                                        shard=shard)
    default_env = dependency_cache(settings, programs.server, mgr.registry)
    workspaces = workspace_setup.setup(mgr, client, settings, connector, default_env)
    updates = update_setup.setup(mgr, client, settings, connector)
    stacks = stack_setup.setup(mgr, client, settings)
    rollouts = rollout_setup.setup(mgr, client, live, settings)
    return Controllers(mgr, stacks, workspaces, updates, programs, rollouts, connector)
