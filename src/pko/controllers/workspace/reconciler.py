"""The Workspace reconciler: run the agent (pod or local), connect to it, initialise it once, report Ready.

Follows the Go operator step by step (pko-v2 §3.2): the StatefulSet the agent runs as is handed to the
workspace runtime (:mod:`~pko.controllers.workspace.runtime`: the ``pod`` runtime applies it with its Service and
waits for the rollout, the ``local`` one runs processes of this operator), then connect with an audience-bound
token, then PulumiVersion → Install → SelectStack/SetAllConfig/AddEnvironments per stack, with the same
conditions, reasons and events.

pko additions (:mod:`~pko.controllers.workspace.fleet`): a change of config values only keeps the pod and applies
the values to the running agent (SelectStack + SetAllConfig, the RPCs of initialisation), recorded in
``status.applied``; with an idle timeout, a Workspace with no Update pending sleeps (no pod or process,
``Ready=True/Sleeping``) and a pending Update wakes it (``Ready=False/Waking``, then the usual start).

Must never: block on an agent longer than its timeouts, put secret values into status or events, or put a
Workspace to sleep while an Update of it is pending (checked against the API server, before and after saying so).
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from pko.api import conditions, lanes, names
from pko.api import update as up_api
from pko.api import workspace as ws_api
from pko.api.meta import Condition
from pko.controllers import connect
from pko.controllers.workspace import built, fleet, initialize, manifests, pool, runtime
from pko.controllers.workspace.runtime import Pending, WorkspaceRuntime
from pko.kube import client as kclient
from pko.kube import events, objects, owners, resources
from pko.protocol import client as agent_client
from pko.protocol import transient
from pko.protocol.proto import agent_pb2
from pko.runtime import metrics, sharding
from pko.runtime.controller import Result

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 5.0
RETRY_AFTER = 5.0

# Workspace Ready reasons (the Go operator's).
DELETING = "Deleting"
ROLLING_UPDATE = runtime.ROLLING_UPDATE
WAITING_FOR_REPLICAS = runtime.WAITING_FOR_REPLICAS
CONNECTION_FAILED = "ConnectionFailed"
INCOMPATIBLE = "IncompatibleConfiguration"
INSTALLING = "Installing"
INSTALLATION_FAILED = "InstallationFailed"
INITIALIZING = "Initializing"
INITIALIZATION_FAILED = "InitializationFailed"
SUCCEEDED = "Succeeded"
SLEEPING = fleet.SLEEPING
WAKING = fleet.WAKING
QUEUED = conditions.QUEUED  # pko: waiting for a slot of the pool of active workspaces (pool.py)

#: How soon a Workspace whose agent is stopping (its pod terminating) looks again whether it is gone, to give its
#: slot of the pool back.
STOPPING_CHECK = 2.0
#: How often a queued Workspace looks at its place in the queue again on its own (its status shows the position):
#: the pool wakes it when its place moved enough to be shown (pool.py), so this is only a safety net.
QUEUED_REFRESH = 300.0

#: The Updates of a Workspace, as the operator's cache has them (the controller's wiring provides it).
UpdatesOf = Callable[[objects.ObjectKey], Sequence[up_api.Update]]


def _no_updates(key: objects.ObjectKey) -> Sequence[up_api.Update]:
    return ()


#: The environment the operator gives every workspace (the dependency cache's URLs, once its address is known).
DefaultEnv = Callable[[], Awaitable[Mapping[str, str]]]


async def _no_env() -> Mapping[str, str]:
    return {}


@dataclass(frozen=True)
class _Stop:
    """This reconcile ends here, with `result` (the pool's answer: queued, yielded, or no agent needed)."""

    result: Result | None


@dataclass
class _Status:
    """The status being built during one reconcile; saved with :meth:`WorkspaceReconciler._save`."""

    workspace: ws_api.Workspace
    conditions: list[Condition]
    address: str | None
    pulumi_version: str | None
    applied: ws_api.AppliedState | None = None
    install_seconds: float | None = None  # how long the Install call took, once it succeeded

    def ready(self, status: str, reason: str, message: str, now: datetime.datetime) -> None:
        self.conditions = conditions.set_condition(
            self.conditions, conditions.READY, status, reason, message,  # type: ignore[arg-type]
            now=now, observed_generation=self.workspace.metadata.generation,
        )

    def stalled(self, reason: str, message: str, now: datetime.datetime) -> None:
        self.conditions = conditions.set_condition(
            self.conditions, conditions.STALLED, "True", reason, message,
            now=now, observed_generation=self.workspace.metadata.generation,
        )


class WorkspaceReconciler:
    def __init__(
        self,
        client: kclient.Client,
        connector: connect.Connector,
        recorder: events.Recorder,
        agent_image: manifests.AgentImage,
        runtime: WorkspaceRuntime,
        *,
        flux_max_untar: str | None = None,
        github_api_url: str | None = None,
        idle_timeout: float = 0.0,
        config_in_place: bool = True,
        updates_of: UpdatesOf = _no_updates,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
        pulumi_metrics: metrics.PulumiMetrics | None = None,
        default_env: DefaultEnv = _no_env,
        active: pool.Pool | None = None,
        share_volume: manifests.ShareVolume | None = None,
    ) -> None:
        self.client = client
        self.shard = sharding.EVERYTHING  # pko: the Workspaces this operator reconciles (--shard-key)
        self.pool = active  # pko: --max-active-workspaces (None: every Workspace runs its agent, as the Go operator)
        self.default_env = default_env  # the operator's env for every workspace (the dependency cache's)
        self.share_volume = share_volume  # pko: --workspace-share-volume-size (None: an emptyDir, as the Go operator)
        self.metrics = pulumi_metrics
        self.connector = connector
        self.recorder = recorder
        self.agent_image = agent_image
        self.runtime = runtime
        self.flux_max_untar = flux_max_untar
        self.github_api_url = github_api_url  # None: github.com's (pko: --github-api-url)
        self.idle_timeout = idle_timeout  # the operator's default (seconds; 0: never); spec.idleTimeout overrides it
        self.config_in_place = config_in_place  # docs/config-without-restart.md
        self.updates_of = updates_of
        self.clock = clock
        self._built = built.Built()  # the StatefulSets of the last revisions seen
        self._refused_at: dict[objects.ObjectKey, datetime.datetime] = {}  # the last try the API server refused
        self._pod_digests = built.Digests(manifests.pod_digest)
        self.show_step_after = initialize.SHOW_STEP_AFTER  # pko: Installing/Initializing written after this long
        #: forgets a reconcile of a Workspace asked for later (the controller's queue; wired by setup): one that
        #: sleeps needs none of the looks its waking asked for
        self.drop_later: Callable[[objects.ObjectKey], None] = lambda key: None

    async def __call__(self, key: objects.ObjectKey) -> Result | None:
        workspace = await self.client.get_typed_or_none(resources.WORKSPACE, ws_api.Workspace, key.name,
                                                        key.namespace)
        if workspace is None or not self.shard.owns_labels(workspace.metadata.labels):
            # gone, or relabelled to another shard (which takes over its pod; a local agent stops here)
            await self.runtime.remove(key)
            await self.connector.forget(key.namespace, key.name)
            self._release(key)
            return None
        previous = workspace.status or ws_api.WorkspaceStatus()
        status = _Status(workspace, list(previous.conditions or []), previous.address, previous.pulumi_version,
                         previous.applied.model_copy() if previous.applied else None)
        now = self.clock()
        if workspace.metadata.deletion_timestamp:
            await self.runtime.remove(key)
            await self.connector.forget(key.namespace, key.name)
            self._release(key)
            status.ready("False", DELETING, "Workspace is being deleted", now)
            await self._save(status)
            return None

        revision = fleet.pod_revision(workspace, self._pod_digests.get(workspace), self.config_in_place)
        applied = status.applied or ws_api.AppliedState()
        if (applied.pod_generation, applied.pod_digest) != (revision.generation, revision.digest):
            # a new pod: the config it gets at initialisation is this generation's
            status.applied = ws_api.AppliedState(pod_generation=revision.generation, pod_digest=revision.digest)
        timeout = fleet.idle_timeout(workspace, self.idle_timeout)
        idle = fleet.AWAKE
        if timeout > 0:
            idle = fleet.decide(timeout, now, conditions.find(status.conditions, conditions.READY),
                                self.updates_of(key))
        if idle.sleep:
            return await self._sleep(workspace, status, revision, fleet.sleeping_message(timeout))
        if self.pool is not None:
            stop = await self._slot(workspace, status, revision, now)
            if stop is not None:
                return stop.result
        if fleet.sleeping(status.conditions):
            # Ready goes False first: the Update controller waits for the Workspace's transition to Ready.
            status.ready("False", WAKING, fleet.WAKING_MESSAGE, now)
            await self._save(status)
            await self.recorder.normal(workspace, "Waking", fleet.WAKING_MESSAGE)

        placed = await self.runtime.place(workspace, await self._statefulset(workspace, revision, replicas=1))
        refused = conditions.find(status.conditions, conditions.STALLED)
        if isinstance(placed, Pending) and placed.stalled:
            self._refused_at[key] = now  # tried again every REFUSED_RETRY_AFTER, also out of the pool (_slot)
        else:
            self._refused_at.pop(key, None)
            if refused is not None and refused.reason in runtime.REFUSED:
                status.conditions = conditions.remove(status.conditions, conditions.STALLED)  # it is taken now
        if isinstance(placed, Pending):
            if placed.reason is not None:
                status.ready("False", placed.reason, placed.message, now)
                status.address = None
                if placed.stalled:
                    status.stalled(placed.reason, placed.message, now)
            await self._save(status)
            return placed.result

        try:
            conn = await self.connector.connect(key.namespace, key.name, placed.address, CONNECT_TIMEOUT)
        except connect.ConnectionFailed as err:
            await self.recorder.warning(workspace, "ConnectionFailure", str(err))
            status.ready("False", CONNECTION_FAILED, str(err), now)
            await self._save(status)
            return Result(requeue_after=RETRY_AFTER)
        generation = workspace.metadata.generation or 0
        async with conn:
            status.address = conn.address
            if not placed.initialized:
                outcome = await self._initialize(workspace, conn, status, placed.translate)
                if outcome is not None:
                    return outcome
                if not await placed.mark_initialized():
                    raise RuntimeError("failed to mark the workspace pod initialised; it was deleted to retry")
                self._measure(workspace, placed.fetch_seconds, status.install_seconds)
                await self.recorder.normal(workspace, "Initialized", f'Initialized workspace pod "{_pod_name(key)}"')
            elif fleet.config_due(status.applied, generation):
                outcome = await self._configure(workspace, conn, status, placed.translate)
                if outcome is not None:
                    return outcome
                await self.recorder.normal(workspace, "ConfigApplied",
                                           f"Applied the configuration of generation {generation} to the running "
                                           "workspace")
        status.applied = (status.applied or ws_api.AppliedState()).model_copy(
            update={"config_generation": generation})
        was_ready = conditions.is_true(status.conditions, conditions.READY)
        status.ready("True", SUCCEEDED, "", self.clock())
        await self._save(status)
        after = idle.requeue_after
        if self.pool is not None and not was_ready:
            # a holder that just became ready counts as busy until its first Update or the grace ends: look again
            # then, or a Stack that makes no Update would keep the slot from the queue
            after = min(after or fleet.FIRST_UPDATE_GRACE + 1, fleet.FIRST_UPDATE_GRACE + 1)
        return Result(requeue_after=after) if after else None

    # --- scale to zero -----------------------------------------------------------------------------------------

    async def _sleep(self, workspace: ws_api.Workspace, status: _Status, revision: fleet.PodRevision,
                     message: str, *, yielded: bool = False) -> Result | None:
        """Say the Workspace sleeps, then stop its agent. An Update created meanwhile (the cache may not have it
        yet) is looked for on the API server once the status says so: the Update controller reads the Workspace
        before it connects, so one that saw the old address was created before that look. (A look before the
        write too would only spare the rare Workspace that wakes again at once a status write, at two lists each
        time any Workspace sleeps: in a pool that turns over, most of the operator's lists.)"""
        key = objects.ObjectKey.of(workspace.metadata)
        was_sleeping = fleet.sleeping(status.conditions)
        status.ready("True", SLEEPING, message, self.clock())
        status.address = None  # `applied` stays: a wake is a new pod, which is initialised from scratch
        await self._save(status)
        if not was_sleeping and await self._pending_on_server(key):
            return Result(requeue=True)  # the next pass wakes it
        # the look at the end of its first Update's grace (or an idle timeout's) is owed to an awake Workspace: in a
        # turning pool most slept long before it, and it came as one more reconcile of each Stack
        self.drop_later(key)
        await self._stop_agent(workspace, revision)
        after = await self._give_back(key, yielded=yielded)
        if not was_sleeping:
            await self.recorder.normal(workspace, "Sleeping", message)
        return after

    async def _stop_agent(self, workspace: ws_api.Workspace, revision: fleet.PodRevision) -> None:
        """No agent for this Workspace: the StatefulSet at zero replicas (or the local agent stopped)."""
        await self.runtime.sleep(workspace, await self._statefulset(workspace, revision, replicas=0))
        await self.connector.forget(workspace.metadata.namespace or "", workspace.metadata.name or "")

    async def _statefulset(self, workspace: ws_api.Workspace, revision: fleet.PodRevision, *,
                           replicas: int) -> dict[str, Any]:
        """The Workspace's StatefulSet at `revision` with `replicas`, built once for each (built.py)."""
        carried = self.shard.carried(workspace.metadata.labels)
        default_env = await self.default_env()

        def build() -> dict[str, Any]:
            return owners.set_controller_reference(
                manifests.statefulset(workspace, self.agent_image, flux_max_untar=self.flux_max_untar,
                                      github_api_url=self.github_api_url, carried=carried,
                                      pod_generation=revision.generation, default_env=default_env,
                                      volume=self.share_volume),
                workspace)

        return self._built.get(built.key(workspace, pod_generation=revision.generation, carried=carried,
                                         default_env=default_env), build, replicas=replicas)

    # --- the pool of active workspaces (pool.py) ----------------------------------------------------------------

    def _report(self, key: objects.ObjectKey, status: _Status) -> bool:
        """Tell the pool how idle a holder is; True when it must give its slot back now. Called with every status
        it gets too (a workspace that just went Stalled, or finished its first start, is then looked at again at
        once when a waiter needs its slot)."""
        if self.pool is None or not self.pool.holds(key):
            return False
        stalled = conditions.find(status.conditions, conditions.STALLED)
        if stalled is not None and stalled.observed_generation != status.workspace.metadata.generation:
            stalled = None  # a new spec is about to be tried: not idle for that
        used = fleet.last_used(self.clock(), conditions.find(status.conditions, conditions.READY), stalled,
                               self.updates_of(key))
        self.pool.used(key, used.timestamp() if used is not None else None)
        return self.pool.must_yield(key)

    def _release(self, key: objects.ObjectKey, *, yielded: bool = False) -> None:
        self._refused_at.pop(key, None)
        if self.pool is not None:
            self.pool.release(key, yielded=yielded)

    async def _give_back(self, key: objects.ObjectKey, *, yielded: bool = False) -> Result | None:
        """Give the slot of `key`, whose agent was told to stop, back to the pool once nothing runs for it: until
        its pod is gone (terminating, it still takes its room on the node) the slot stays taken, and this looks
        again shortly. A slot not taken costs no look."""
        if self.pool is None:
            return None
        if (self.pool.holds(key) or self.pool.stopping(key)) and not await self.runtime.stopped(key):
            self.pool.release(key, yielded=yielded, draining=True)
            return Result(requeue_after=STOPPING_CHECK)
        self.pool.release(key, yielded=yielded)
        return None

    async def _slot(self, workspace: ws_api.Workspace, status: _Status, revision: fleet.PodRevision,
                    now: datetime.datetime) -> _Stop | None:
        """Hold a slot of the pool before the agent runs (None: go on). A holder reports how idle it is, and gives
        its slot back when a waiter needs it; a Workspace that needs no agent (asleep with nothing pending, or
        Stalled with its agent stopped) leaves the queue; any other waits, saying where it is in the queue."""
        assert self.pool is not None
        key = objects.ObjectKey.of(workspace.metadata)
        updates = self.updates_of(key)
        ready = conditions.find(status.conditions, conditions.READY)
        stalled = conditions.find(status.conditions, conditions.STALLED)
        if self.pool.holds(key):
            if not self._report(key, status):
                return None
            if stalled is not None and stalled.status == "True":
                return _Stop(await self._stop_stalled(workspace, status, revision))
            return _Stop(await self._sleep(workspace, status, revision, fleet.yielded_message(self.pool.size),
                                           yielded=True))
        pending = [u for u in updates if fleet.pending((u,))]
        stalled_here = (stalled is not None and stalled.status == "True"
                        and stalled.observed_generation == workspace.metadata.generation)
        if fleet.sleeping(status.conditions) and not pending:
            return _Stop(await self._give_back(key))
        if stalled_here and not status.address:
            # a refusal is tried again now and then (an admission policy may be what changes): the try needs a slot
            assert stalled is not None
            wait = fleet.refusal_retry_in(stalled.reason, self._refused_at.get(key), now, runtime.REFUSED_RETRY_AFTER)
            if wait is None or wait > 0:
                after = await self._give_back(key)
                if wait is not None and (after is None or after.requeue_after is None or after.requeue_after >= wait):
                    after = Result(requeue_after=wait)  # the next try, unless the slot's drain is looked at sooner
                return _Stop(after)
        # woken while its own pod still terminates: that slot frees first
        if self.pool.stopping(key) and (after := await self._give_back(key)) is not None:
            return _Stop(after)
        queued = self.pool.claim(key, lanes.of_updates(pending))
        if queued is None:
            return None
        if (ready is None or ready.reason != QUEUED) and not pool.stack_tells(workspace):
            await self.recorder.normal(workspace, "Queued", queued.message())
        shown = ready.message if ready is not None and ready.reason == QUEUED else None
        if ready is None or ready.observed_generation != workspace.metadata.generation or pool.worth_writing(
                shown, queued):
            status.ready("False", QUEUED, queued.message(), now)
        status.address = None
        await self._save(status)
        return _Stop(Result(requeue_after=QUEUED_REFRESH))

    async def _stop_stalled(self, workspace: ws_api.Workspace, status: _Status,
                            revision: fleet.PodRevision) -> Result | None:
        """A Stalled Workspace cannot work until its spec changes: its agent stops and its slot goes to a waiter;
        its conditions stay as they are (the next generation asks for a slot again)."""
        assert self.pool is not None
        key = objects.ObjectKey.of(workspace.metadata)
        status.address = None
        await self._save(status)
        await self._stop_agent(workspace, revision)
        after = await self._give_back(key, yielded=True)
        await self.recorder.normal(workspace, "Yielded",
                                   f"Stopped the agent of a Stalled workspace to give its slot to a waiting one "
                                   f"(--max-active-workspaces {self.pool.size})")
        return after

    async def _pending_on_server(self, key: objects.ObjectKey) -> bool:
        """Whether an Update for `key` is pending on the API server (the cache may not have it yet). A Stack's
        Updates carry its name (the Workspace's) as a label, as the Go operator's do; Updates made by hand may carry
        none. Those two lists, not the namespace's every Update: in a namespace of 1,000 Stacks, decoding every
        Update each time a Workspace went to sleep was a tenth of the operator's CPU."""
        labelled, unlabelled = await asyncio.gather(
            self.client.list(resources.UPDATE, key.namespace, labels={names.LABEL_STACK_NAME: key.name}),
            self.client.list(resources.UPDATE, key.namespace, selector=f"!{names.LABEL_STACK_NAME}"))
        mine = [up_api.Update.model_validate(u) for u in (*labelled.items, *unlabelled.items)
                if (u.get("spec") or {}).get("workspaceName") == key.name]
        return fleet.pending(mine)

    # --- initialisation ----------------------------------------------------------------------------------------

    async def _initialize(self, workspace: ws_api.Workspace, conn: connect.Connection,
                          status: _Status, translate: Callable[[str], str]) -> Result | None:
        status.conditions = conditions.remove(status.conditions, conditions.STALLED)
        try:
            version = await conn.stub.PulumiVersion(agent_pb2.PulumiVersionRequest(), metadata=conn.metadata)
        except grpc.aio.AioRpcError as err:
            reason, message = agent_client.failure(err)
            await self.recorder.warning(workspace, "ConnectionFailure", message)
            status.ready("False", reason, message, self.clock())
            await self._save(status)
            raise RuntimeError(f"PulumiVersion failed: {message}") from err
        status.pulumi_version = version.version
        refused = await self._incompatible(workspace, status, version.version)
        if refused is not None:
            return refused

        show = functools.partial(self._save, status)  # the status a slow step writes
        if initialize.needs_install(workspace.spec or ws_api.WorkspaceSpec()):
            status.ready("False", INSTALLING, "Installing packages and plugins required by the program", self.clock())
            try:
                installing = time.monotonic()
                await initialize.shown_if_slow(
                    conn.stub.Install(agent_pb2.InstallRequest(), metadata=conn.metadata), show, self.show_step_after)
                status.install_seconds = time.monotonic() - installing
            except grpc.aio.AioRpcError as err:
                return await self._failed(workspace, status, err, INSTALLATION_FAILED, "InstallationFailure", "")
        else:
            log.info("not installing: the workspace holds a project file only (projectInfo), no program")

        status.ready("False", INITIALIZING, "Initializing and selecting a Pulumi stack", self.clock())
        return await self._select_stacks(workspace, conn, status, translate, environments=True, show=show)

    async def _configure(self, workspace: ws_api.Workspace, conn: connect.Connection,
                         status: _Status, translate: Callable[[str], str]) -> Result | None:
        """pko: give the running, initialised agent this generation's config values (only they changed since its
        pod started: :func:`fleet.pod_revision`), with the RPCs and failure handling of initialisation."""
        status.conditions = conditions.remove(status.conditions, conditions.STALLED)
        if status.pulumi_version:
            refused = await self._incompatible(workspace, status, status.pulumi_version)
            if refused is not None:
                return refused
        return await self._select_stacks(workspace, conn, status, translate, environments=False)

    async def _incompatible(self, workspace: ws_api.Workspace, status: _Status, version: str) -> Result | None:
        """Stalled `IncompatibleConfiguration` when the workspace's CLI is too old for its structured config."""
        spec = workspace.spec or ws_api.WorkspaceSpec()
        problem = initialize.json_config_problem(spec.stacks, version)
        if problem is None:
            return None
        status.stalled(INCOMPATIBLE, problem, self.clock())
        status.ready("False", INCOMPATIBLE, problem, self.clock())
        await self.recorder.warning(workspace, "StackInitializationFailure", problem)
        await self._save(status)
        return Result()

    async def _select_stacks(self, workspace: ws_api.Workspace, conn: connect.Connection, status: _Status,
                             translate: Callable[[str], str], *, environments: bool,
                             show: Callable[[], Awaitable[None]] | None = None) -> Result | None:
        """SelectStack, SetAllConfig and (at initialisation) AddEnvironments for each stack of the Workspace (with
        `show`: written as `status` says once they take long, :func:`initialize.shown_if_slow`)."""
        spec = workspace.spec or ws_api.WorkspaceSpec()
        current = ""  # the stack being selected: the one a failure names

        async def select_all() -> None:
            nonlocal current
            for stack in spec.stacks or ():
                current = stack.name
                request = agent_pb2.SelectStackRequest(stack_name=stack.name)
                if stack.create is not None:
                    request.create = stack.create
                if stack.secrets_provider is not None:
                    request.secrets_provider = stack.secrets_provider
                await conn.stub.SelectStack(request, metadata=conn.metadata)
                if stack.config:
                    items = initialize.config_items(stack.config, translate)
                    await conn.stub.SetAllConfig(agent_pb2.SetAllConfigRequest(config=items), metadata=conn.metadata)
                if environments and stack.environment:
                    await conn.stub.AddEnvironments(
                        agent_pb2.AddEnvironmentsRequest(environment=stack.environment), metadata=conn.metadata)

        try:
            if show is None:
                await select_all()
            else:
                await initialize.shown_if_slow(select_all(), show, self.show_step_after)
        except grpc.aio.AioRpcError as err:
            return await self._failed(workspace, status, err, INITIALIZATION_FAILED, "StackInitializationFailure",
                                      f'Failed to initialize stack "{current}": ')
        return None

    async def _failed(self, workspace: ws_api.Workspace, status: _Status, err: grpc.aio.AioRpcError, reason: str,
                      event: str, event_prefix: str) -> Result:
        """An initialisation step failed: a passing failure (:mod:`.transient`) leaves the Workspace not Ready and
        comes back with the controller's backoff; any other is final (`Stalled`) until the spec changes."""
        message = err.details() or str(err.code())
        passing = transient.is_transient(err.code(), message)
        if passing:
            message = transient.retry_message(message)
        await self.recorder.warning(workspace, event, event_prefix + message)
        if not passing:
            status.stalled(reason, message, self.clock())
        status.ready("False", reason, message, self.clock())
        await self._save(status)
        return Result(requeue=passing)

    def _measure(self, workspace: ws_api.Workspace, fetch: float | None, install: float | None) -> None:
        """The fetch and install phases of a newly initialised agent (pko's `pulumi_update_phase_duration_seconds`),
        labelled with the Stack that owns the Workspace (else the Workspace's own name)."""
        if self.metrics is None:
            return
        meta = workspace.metadata
        stack = next((ref.name for ref in meta.owner_references or ()
                      if ref.kind == "Stack" and ref.api_version.split("/")[0] == "pulumi.com"), meta.name or "")
        for phase, seconds in (("fetch", fetch), ("install", install)):
            if seconds is not None:
                self.metrics.phase(meta.namespace or "", stack, phase, seconds)

    # --- status ------------------------------------------------------------------------------------------------

    async def _save(self, status: _Status) -> None:
        meta = status.workspace.metadata
        if self._report(objects.ObjectKey.of(meta), status):
            assert self.pool is not None
            self.pool.wake(objects.ObjectKey.of(meta))
        body: dict[str, Any] = {"observedGeneration": meta.generation or 0,
                                "conditions": [c.to_wire()
                                               for c in status.conditions]}
        if status.address:
            body["address"] = status.address
        if status.pulumi_version:
            body["pulumiVersion"] = status.pulumi_version
        if status.applied is not None:
            body["applied"] = status.applied.to_wire()
        if objects.status_unchanged(status.workspace.status, body):
            return  # most reconciles of a settled Workspace change nothing: no request for them
        await self.client.apply_status(
            objects.status_apply(ws_api.API_VERSION, ws_api.KIND, objects.ObjectKey.of(meta), body),
            field_manager=names.FIELD_MANAGER_WORKSPACE_STATUS,
        )


def _pod_name(key: objects.ObjectKey) -> str:
    return names.workspace_pod_name(key.name)
