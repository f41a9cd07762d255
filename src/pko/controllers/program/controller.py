"""The Program controller's executor and its wiring into a manager, next to the program file server.

Why: :func:`setup` is the one call the operator command makes. It registers the ``program-controller`` (a
Program reconciles when it appears or its generation changes; the status comes from
:mod:`pko.controllers.program.plan` and is server-side applied by ``pulumi-kubernetes-operator/program-status``),
the ``programs_active`` gauge (the number of Programs in the informer cache, on every replica), and builds the
:class:`~pko.controllers.program.fileserver.FileServer` that reads Programs from the same cache. The manager runs
the controller only while leading; the file server is a separate task run on every replica
(:meth:`Programs.serve`), because workspaces download from whichever replica the URL names.

This module must never decide what a status or a reply holds (the plan and serving modules do) and never write
anything but a Program's status.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import logging
import os
import socket
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import Gauge

from pko import kube, runtime
from pko.api import names
from pko.api import program as program_api
from pko.controllers.program import address, fileserver, plan, serving
from pko.kube import objects, resources
from pko.runtime import sharding, store

log = logging.getLogger(__name__)

PROGRAMS_ACTIVE = "programs_active"
PROGRAMS_ACTIVE_HELP = "Number of Program objects currently tracked by the Pulumi Kubernetes Operator"
DEFAULT_WORKERS = 25

Clock = Callable[[], datetime.datetime]


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclasses.dataclass
class Programs:
    """The Program controller's parts, as :func:`setup` wired them."""

    client: kube.Client
    informer: runtime.Informer
    server: fileserver.FileServer
    clock: Clock = utc_now
    shard: sharding.Shard = sharding.EVERYTHING  # every shard reads Programs; the one that owns them reconciles

    async def reconcile(self, key: objects.ObjectKey) -> runtime.Result | None:
        """Bring one Program's status up to date with its generation and the advertised address."""
        cached = self.informer.store.get(key)
        if cached is None or not self.shard.owns(cached):
            return None
        program = program_api.Program.model_validate(cached)
        decision = plan.plan(program, advertised=await self.server.advertised(), now=self.clock())
        if decision.status is None:
            return None
        log.info("artifact of generation %s: %s", program.metadata.generation or 0, decision.artifact.digest)
        try:
            await self.client.apply_status(plan.status_apply(program, decision.status),
                                           field_manager=names.FIELD_MANAGER_PROGRAM_STATUS)
        except kube.NotFound:
            return None  # deleted meanwhile
        return None

    async def serve(self) -> None:
        """Run the file server until cancelled (on every replica, whether or not it leads)."""
        await self.server.run()


async def lookup(client: kube.Client, informer: runtime.Informer, ref: serving.ProgramRef) -> dict[str, Any] | None:
    """The Program a download asks for: from the cache when it is at least at the requested generation, else from
    the API server (on a standby replica, or when the cache lags the status that published the URL)."""
    if not ref.namespace or not ref.name:
        return None
    if informer.synced:
        cached = informer.store.get(objects.ObjectKey(ref.namespace, ref.name))
        if cached is not None and objects.generation_of(cached) >= ref.generation:
            return cached
    try:
        return await client.get(resources.PROGRAM, ref.name, ref.namespace)
    except kube.ApiError as err:  # as the Go server: any failure to get the Program is a 404
        log.debug("program %s/%s: %s", ref.namespace, ref.name, err)
        return None


def setup(
    manager: runtime.Manager,
    client: kube.Client | None = None,
    *,
    listen: str | None = None,
    advertised: str | None = None,
    workers: int = DEFAULT_WORKERS,
    env: Mapping[str, str] | None = None,
    hostname: Callable[[], str] = socket.gethostname,
    clock: Clock = utc_now,
    shard: sharding.Shard = sharding.EVERYTHING,
) -> Programs:
    """Register the Program controller and the ``programs_active`` gauge with ``manager`` and build the file
    server. ``listen`` is ``--program-fs-addr`` (default ``$PROGRAM_FS_ADDR`` or ``:9090``), ``advertised`` is
    ``--program-fs-adv-addr`` (default ``$PROGRAM_FS_ADV_ADDR``, else derived from ``listen``). Run
    ``Programs.serve()`` next to ``manager.run()``."""
    environ = dict(os.environ if env is None else env)
    api = client if client is not None else manager.client
    informer = manager.informer(resources.PROGRAM)
    server = fileserver.FileServer(
        functools.partial(lookup, api, informer),
        listen=address.listen_address(listen, environ),
        advertised=advertised,
        env=environ,
        hostname=hostname,
    )
    programs = Programs(api, informer, server, clock, shard)
    manager.controller(names.PROGRAM_CONTROLLER, programs.reconcile, workers=workers).watch(
        informer, predicate=functools.partial(program_changed, shard)
    )
    gauge = Gauge(PROGRAMS_ACTIVE, PROGRAMS_ACTIVE_HELP, registry=manager.registry)
    gauge.set_function(lambda: len(informer.store) if shard.everything
                       else sum(1 for p in informer.store.list() if shard.owns(p)))
    return programs


def program_changed(shard: sharding.Shard, event: store.Event) -> bool:
    """A Program of this shard has a new generation, or was just relabelled into this shard (its artifact URL then
    names another shard's file server, which this shard's replaces)."""
    if event.type == "DELETED" or not shard.owns(event.object):
        return False
    moved_in = event.old is not None and not shard.owns(event.old)
    return moved_in or runtime.generation_changed(event)
