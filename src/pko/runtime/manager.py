"""The manager: one process's informers, controllers, leader election and probe/metrics endpoints.

Lifecycle of :meth:`Manager.run` (until cancelled):

1. serve ``/healthz`` and ``/readyz`` (health address) and ``/metrics`` (metrics address);
2. start every informer — also on standby replicas, so a successor's caches are warm when it takes over;
3. campaign for the Lease (or skip that when leader election is off); once leading, run every controller;
4. when the lease is lost, cancel the controllers (in-flight reconciles are cancelled) and campaign again;
5. on cancellation: stop the controllers, release the lease, stop informers and servers.

So reconcilers run only while this process leads. Informers are shared: :meth:`Manager.informer` returns the
same one for the same kind, whichever controller asks. The manager must never reconcile or interpret objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping

import prometheus_client
from prometheus_client import CollectorRegistry

from pko import kube
from pko.kube import resources
from pko.runtime import compactmetrics, httpserver, informer, leader, leaderelection, metrics, ratelimit, store
from pko.runtime import controller as ctl

log = logging.getLogger(__name__)

Check = Callable[[], Awaitable[bool] | bool]


@dataclasses.dataclass(frozen=True)
class LeaderElection:
    """``--leader-elect`` and its timings; ``namespace`` is where the Lease lives (``$POD_NAMESPACE``). ``client``
    reads and renews the Lease (``None``: the manager's client). The operator gives it a client with a request budget
    of its own, as controller-runtime's leader election has its own client: under ``--kube-api-qps`` a renewal
    sharing the controllers' token bucket would queue behind their requests past the renew deadline."""

    namespace: str
    name: str = leaderelection.DEFAULT_LEASE_NAME
    identity: str | None = None
    timing: leaderelection.Timing = dataclasses.field(default_factory=leaderelection.Timing)
    client: kube.Client | None = None


class Manager:
    def __init__(
        self,
        client: kube.Client,
        *,
        namespace: str | None = None,
        leader_election: LeaderElection | None = None,
        health_address: str = ":8081",
        metrics_address: str = "0",
        registry: CollectorRegistry | None = None,
    ) -> None:
        """``namespace`` limits every informer to one namespace (``None``: cluster-wide). Addresses are Go-style
        (``":8081"``, ``"127.0.0.1:0"``; ``"0"`` turns a server off). ``registry`` defaults to the process-wide
        Prometheus registry."""
        self.client = client
        self.namespace = namespace
        self.registry = registry if registry is not None else prometheus_client.REGISTRY
        self.metrics = metrics.Metrics(self.registry)
        self.elector = (
            leader.LeaderElector(leader_election.client or client, leader_election.namespace, name=leader_election.name,
                                 identity=leader_election.identity, timing=leader_election.timing)
            if leader_election is not None else None
        )
        self.informers: dict[resources.Kind, informer.Informer] = {}
        self._selectors: dict[resources.Kind, str] = {}
        self.controllers: list[ctl.Controller] = []
        self.readiness_checks: dict[str, Check] = {}
        self.leading = asyncio.Event()
        self.health_server = httpserver.Server({"/healthz": self._healthz, "/readyz": self._readyz})
        self.metrics_server = httpserver.Server({"/metrics": self._metrics})
        self._health_address = health_address
        self._metrics_address = metrics_address
        self._started = False
        self._group: asyncio.TaskGroup | None = None
        self._leadership: list[tuple[Callable[[], None], Callable[[], Awaitable[None]] | None]] = []

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    def select(self, kind: resources.Kind | str, selector: str | None) -> None:
        """Watch only the objects of ``kind`` that match the label selector ``selector`` (None: all of them); before
        the first :meth:`informer` of that kind."""
        k = resources.resource(kind)
        if k in self.informers:
            raise RuntimeError(f"the {k.kind} informer exists already: select before it is created")
        if selector:
            self._selectors[k] = selector
        else:
            self._selectors.pop(k, None)

    def informer(self, kind: resources.Kind | str, *, indexers: Mapping[str, store.Indexer] | None = None
                 ) -> informer.Informer:
        """The shared informer of ``kind`` (created on first request, and started at once if the manager runs
        already); ``indexers`` are added to it."""
        k = resources.resource(kind)
        found = self.informers.get(k)
        if found is None:
            found = informer.Informer(self.client, k, namespace=self.namespace, selector=self._selectors.get(k))
            self.informers[k] = found
            if self._group is not None:
                self._group.create_task(found.run(), name=f"informer-{k.kind}")
        for name, indexer in (indexers or {}).items():
            found.add_indexer(name, indexer)
        return found

    def controller(
        self,
        name: str,
        reconcile: ctl.Reconciler,
        *,
        workers: int = 1,
        rate_limiter: Callable[[], ratelimit.RateLimiter] = ratelimit.RateLimiter,
    ) -> ctl.Controller:
        """A new controller run by this manager; give it watches with :meth:`Controller.watch`.
        ``rate_limiter`` builds the retry policy of each run (controller-runtime's default)."""
        if self._started:
            raise RuntimeError("add controllers before the manager runs")
        controller = ctl.Controller(name, reconcile, workers=workers, rate_limiter=rate_limiter,
                                    metrics=self.metrics.controller(name))
        self.controllers.append(controller)
        return controller

    def on_leadership(self, gained: Callable[[], None], lost: Callable[[], Awaitable[None]] | None = None) -> None:
        """Tell a part of the operator when this process starts leading (`gained`, before the controllers start)
        and stops (`lost`, awaited once they stopped): what it keeps outside the controllers — an Update's
        operation in a task of its own, the pool's holders and waiters, a window counted from the start — belongs
        to one term of leadership. A replica that loses the Lease campaigns again in the same process: what it
        kept from its last term is stale (another replica led in between), and what it still runs would run beside
        the new leader's."""
        self._leadership.append((gained, lost))

    def add_readiness_check(self, name: str, check: Check) -> None:
        self.readiness_checks[name] = check

    # --- endpoints -------------------------------------------------------------------------------------------

    async def _healthz(self) -> httpserver.Response:
        return 200, "text/plain; charset=utf-8", b"ok"

    async def _readyz(self) -> httpserver.Response:
        failing = [f"informer {i.kind.kind}" for i in self.informers.values() if not i.synced]
        for name, check in self.readiness_checks.items():
            outcome = check()
            if not (await outcome if isinstance(outcome, Awaitable) else outcome):
                failing.append(name)
        if failing:
            return 503, "text/plain; charset=utf-8", ("not ready: " + ", ".join(failing)).encode()
        return 200, "text/plain; charset=utf-8", b"ok"

    async def _metrics(self) -> httpserver.Response:
        return 200, prometheus_client.CONTENT_TYPE_LATEST, compactmetrics.exposition(self.registry)

    # --- running ---------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until cancelled (see the module docstring)."""
        self._started = True
        async with contextlib.AsyncExitStack() as stack:
            for server, address in ((self.health_server, self._health_address),
                                    (self.metrics_server, self._metrics_address)):
                bound = httpserver.parse_address(address)
                if bound is not None:
                    await server.start(*bound)
                    stack.push_async_callback(server.close)
            try:
                async with asyncio.TaskGroup() as group:
                    self._group = group
                    for source in list(self.informers.values()):
                        group.create_task(source.run(), name=f"informer-{source.kind.kind}")
                    group.create_task(self._lead(), name="leader")
            finally:
                self._group = None

    async def _lead(self) -> None:
        if self.elector is None:
            self.leading.set()
            try:
                await self._run_controllers()
            finally:
                self.leading.clear()
            return
        gauge = self.metrics.leader.labels(self.elector.name)
        try:
            while True:
                gauge.set(0)
                await self.elector.campaign()
                gauge.set(1)
                self.leading.set()
                log.info("leading as %s: starting %d controllers", self.elector.identity, len(self.controllers))
                try:
                    async with asyncio.TaskGroup() as group:
                        controllers = group.create_task(self._run_controllers())
                        await self.elector.hold()
                        controllers.cancel()
                finally:
                    self.leading.clear()
                    gauge.set(0)
                log.warning("leadership lost: controllers stopped; campaigning again")
        finally:
            self.leading.clear()
            await asyncio.shield(self.elector.release())

    async def _run_controllers(self) -> None:
        for gained, _ in self._leadership:
            gained()
        try:
            async with asyncio.TaskGroup() as group:
                for controller in self.controllers:
                    group.create_task(controller.run(), name=f"controller-{controller.name}")
        finally:
            for _, lost in self._leadership:
                if lost is None:
                    continue
                try:
                    await asyncio.shield(lost())
                except Exception:  # one part failing to stop must not keep the others running
                    log.exception("stopping what this term of leadership ran")
