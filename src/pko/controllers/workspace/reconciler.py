"""The Workspace reconciler: run the agent (pod or local), connect to it, initialise it once, report Ready.

Follows the Go operator step by step (pko-v2 §3.2): Service + StatefulSet by server-side apply, wait for the
rollout, connect with an audience-bound token, then PulumiVersion → Install → SelectStack/SetAllConfig/
AddEnvironments per stack, and the same conditions, reasons and events. With the `local` runtime the pod is
replaced by processes of this operator (see :mod:`pko.controllers.workspace.local`).

Must never: block on an agent longer than its timeouts, put secret values into status or events.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from pko.api import conditions, names
from pko.api import workspace as ws_api
from pko.api.meta import Condition
from pko.controllers import connect
from pko.controllers.workspace import initialize, local, manifests
from pko.kube import client as kclient
from pko.kube import errors, events, objects, owners, resources
from pko.protocol import client as agent_client
from pko.protocol.proto import agent_pb2
from pko.runtime.controller import Result

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 5.0
RETRY_AFTER = 5.0

# Workspace Ready reasons (the Go operator's).
DELETING = "Deleting"
ROLLING_UPDATE = "RollingUpdate"
WAITING_FOR_REPLICAS = "WaitingForReplicas"
CONNECTION_FAILED = "ConnectionFailed"
INCOMPATIBLE = "IncompatibleConfiguration"
INSTALLING = "Installing"
INSTALLATION_FAILED = "InstallationFailed"
INITIALIZING = "Initializing"
INITIALIZATION_FAILED = "InitializationFailed"
SUCCEEDED = "Succeeded"


@dataclass
class _Status:
    """The status being built during one reconcile; saved with :meth:`WorkspaceReconciler._save`."""

    workspace: ws_api.Workspace
    conditions: list[Condition]
    address: str | None
    pulumi_version: str | None

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
        *,
        local_runtime: local.LocalRuntime | None = None,
        flux_max_untar: str | None = None,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.client = client
        self.connector = connector
        self.recorder = recorder
        self.agent_image = agent_image
        self.local = local_runtime
        self.flux_max_untar = flux_max_untar
        self.clock = clock

    async def __call__(self, key: objects.ObjectKey) -> Result | None:
        obj = await self.client.get_or_none(resources.WORKSPACE, key.name, key.namespace)
        if obj is None:
            if self.local is not None:
                await self.local.stop(key)
            return None
        workspace = ws_api.Workspace.model_validate(obj)
        status = _Status(workspace, list((workspace.status.conditions if workspace.status else None) or []),
                         workspace.status.address if workspace.status else None,
                         workspace.status.pulumi_version if workspace.status else None)
        now = self.clock()
        if objects.is_deleting(obj):
            if self.local is not None:
                await self.local.stop(key)
            status.ready("False", DELETING, "Workspace is being deleted", now)
            await self._save(status)
            return None

        statefulset = owners.set_controller_reference(
            manifests.statefulset(workspace, self.agent_image, flux_max_untar=self.flux_max_untar), obj)
        if self.local is not None:
            placed = await self._place_local(obj, workspace, statefulset, status)
        else:
            placed = await self._place_pod(obj, workspace, statefulset, status)
        if isinstance(placed, Result) or placed is None:
            await self._save(status)
            return placed
        address, initialized, mark_initialized, translate = placed

        try:
            conn = await self.connector.connect(key.namespace, key.name, address, CONNECT_TIMEOUT)
        except connect.ConnectionFailed as err:
            await self.recorder.warning(obj, "ConnectionFailure", str(err))
            status.ready("False", CONNECTION_FAILED, str(err), now)
            await self._save(status)
            return Result(requeue_after=RETRY_AFTER)
        async with conn:
            status.address = conn.address
            if not initialized:
                outcome = await self._initialize(obj, workspace, conn, status, translate)
                if outcome is not None:
                    return outcome
                if not await mark_initialized():
                    raise RuntimeError("failed to mark the workspace pod initialised; it was deleted to retry")
                await self.recorder.normal(obj, "Initialized", f'Initialized workspace pod "{_pod_name(key)}"')
        status.ready("True", SUCCEEDED, "", self.clock())
        await self._save(status)
        return None

    # --- placement ---------------------------------------------------------------------------------------------

    async def _place_pod(self, obj: objects.Object, workspace: ws_api.Workspace, statefulset: dict[str, Any],
                         status: _Status) -> Any:
        now = self.clock()
        key = objects.key_of(obj)
        await self.client.apply(owners.set_controller_reference(manifests.service(workspace), obj))
        try:
            applied = await self.client.apply(statefulset)
        except errors.Invalid:
            await self.client.delete(resources.STATEFUL_SET, statefulset["metadata"]["name"], key.namespace,
                                     missing_ok=True)
            await self.recorder.normal(obj, "Migrated", "Replaced the workspace statefulset")
            return Result(requeue_after=RETRY_AFTER)
        sts_status = applied.get("status") or {}
        generation = applied.get("metadata", {}).get("generation")
        if (sts_status.get("observedGeneration") != generation
                or sts_status.get("updateRevision") != sts_status.get("currentRevision")):
            status.ready("False", ROLLING_UPDATE, "Waiting for the statefulset to be updated", now)
            status.address = None
            return None
        if (sts_status.get("availableReplicas") or 0) < 1:
            status.ready("False", WAITING_FOR_REPLICAS, "Waiting for the workspace pod to be available", now)
            status.address = None
            return None
        pod = await self.client.get(resources.POD, _pod_name(key), key.namespace)
        if objects.labels_of(pod).get("controller-revision-hash") != sts_status.get("currentRevision"):
            return Result(requeue=True)
        initialized = objects.annotations_of(pod).get(names.ANNOTATION_INITIALIZED, "").lower() == "true"

        async def mark() -> bool:
            try:
                await self.client.patch(resources.POD, _pod_name(key), {
                    "metadata": {"annotations": {names.ANNOTATION_INITIALIZED: "true"},
                                 "resourceVersion": objects.resource_version_of(pod)}}, key.namespace)
                return True
            except errors.ApiError:
                await self.client.delete(resources.POD, _pod_name(key), key.namespace, missing_ok=True)
                return False

        return manifests.service_address(workspace), initialized, mark, lambda p: p

    async def _place_local(self, obj: objects.Object, workspace: ws_api.Workspace, statefulset: dict[str, Any],
                           status: _Status) -> Any:
        assert self.local is not None
        try:
            agent = await self.local.ensure(workspace, statefulset)
        except local.StartFailed as err:
            status.ready("False", WAITING_FOR_REPLICAS, f"Waiting for the workspace agent: {err}", self.clock())
            status.address = None
            return Result(requeue=True)

        async def mark() -> bool:
            agent.initialized = True
            return True

        return agent.address, agent.initialized, mark, agent.translate

    # --- initialisation ----------------------------------------------------------------------------------------

    async def _initialize(self, obj: objects.Object, workspace: ws_api.Workspace, conn: connect.Connection,
                          status: _Status, translate: Callable[[str], str]) -> Result | None:
        status.conditions = conditions.remove(status.conditions, conditions.STALLED)
        spec = workspace.spec or ws_api.WorkspaceSpec()
        try:
            version = await conn.stub.PulumiVersion(agent_pb2.PulumiVersionRequest(), metadata=conn.metadata)
        except grpc.aio.AioRpcError as err:
            reason, message = agent_client.failure(err)
            await self.recorder.warning(obj, "ConnectionFailure", message)
            status.ready("False", reason, message, self.clock())
            await self._save(status)
            raise RuntimeError(f"PulumiVersion failed: {message}") from err
        status.pulumi_version = version.version
        problem = initialize.json_config_problem(spec.stacks, version.version)
        if problem is not None:
            status.stalled(INCOMPATIBLE, problem, self.clock())
            status.ready("False", INCOMPATIBLE, problem, self.clock())
            await self.recorder.warning(obj, "StackInitializationFailure", problem)
            await self._save(status)
            return Result()

        status.ready("False", INSTALLING, "Installing packages and plugins required by the program", self.clock())
        await self._save(status)
        try:
            await conn.stub.Install(agent_pb2.InstallRequest(), metadata=conn.metadata)
        except grpc.aio.AioRpcError as err:
            message = err.details() or str(err.code())
            await self.recorder.warning(obj, "InstallationFailure", message)
            status.stalled(INSTALLATION_FAILED, message, self.clock())
            status.ready("False", INSTALLATION_FAILED, message, self.clock())
            await self._save(status)
            return Result()

        status.ready("False", INITIALIZING, "Initializing and selecting a Pulumi stack", self.clock())
        await self._save(status)
        for stack in spec.stacks or ():
            try:
                request = agent_pb2.SelectStackRequest(stack_name=stack.name)
                if stack.create is not None:
                    request.create = stack.create
                if stack.secrets_provider is not None:
                    request.secrets_provider = stack.secrets_provider
                await conn.stub.SelectStack(request, metadata=conn.metadata)
                if stack.config:
                    items = initialize.config_items(stack.config, translate)
                    await conn.stub.SetAllConfig(agent_pb2.SetAllConfigRequest(config=items), metadata=conn.metadata)
                if stack.environment:
                    await conn.stub.AddEnvironments(
                        agent_pb2.AddEnvironmentsRequest(environment=stack.environment), metadata=conn.metadata)
            except grpc.aio.AioRpcError as err:
                message = err.details() or str(err.code())
                await self.recorder.warning(obj, "StackInitializationFailure",
                                            f'Failed to initialize stack "{stack.name}": {message}')
                status.stalled(INITIALIZATION_FAILED, message, self.clock())
                status.ready("False", INITIALIZATION_FAILED, message, self.clock())
                await self._save(status)
                return Result()
        return None

    # --- status ------------------------------------------------------------------------------------------------

    async def _save(self, status: _Status) -> None:
        meta = status.workspace.metadata
        body: dict[str, Any] = {"observedGeneration": meta.generation or 0,
                                "conditions": [c.model_dump(by_alias=True, exclude_none=True, mode="json")
                                               for c in status.conditions]}
        if status.address:
            body["address"] = status.address
        if status.pulumi_version:
            body["pulumiVersion"] = status.pulumi_version
        await self.client.apply_status(
            {"apiVersion": ws_api.API_VERSION, "kind": ws_api.KIND,
             "metadata": {"name": meta.name, "namespace": meta.namespace}, "status": body},
            field_manager=names.FIELD_MANAGER_WORKSPACE_STATUS,
        )


def _pod_name(key: objects.ObjectKey) -> str:
    return names.workspace_pod_name(key.name)
