"""The ``pod`` workspace runtime: the agent runs in the pod of a StatefulSet, behind a headless Service.

Follows the Go operator (pko-v2 §3.2): Service and StatefulSet by server-side apply (a StatefulSet the API server
refuses to update in place is deleted and recreated: "Migrated"), wait for the rollout and an available replica,
then the agent is at the Service's address. While the pod cannot start, the kubelet's reason (a refused security
profile, a pull error, a crash loop) goes into Ready's message and a PodFailure event; while there is no pod at
all, the API server's refusal of it (a quota, the namespace's Pod Security level, a webhook), which only the
StatefulSet's FailedCreate event holds. A StatefulSet refused as invalid is deleted and created again only when
one exists and the refusal is of a field a StatefulSet cannot change in place (the reference's migration); any
other refusal of it or of the Service is the template's fault (a typo in `podTemplate`, an admission policy), and
the Workspace is Stalled ``StatefulSetInvalid`` or ``ServiceInvalid`` with the API server's words, what exists left
running, tried again every 5 minutes and at once when the spec changes (the reference deletes the StatefulSet and
applies it again every 5 s, for ever, killing a running pod each time). The pod's
``auto.pulumi.com/initialized`` annotation records that the agent was initialised; when it cannot be set, the pod
is deleted so that a fresh one starts over.

Must never: wait for a rollout (the StatefulSet watch re-queues the Workspace), or touch a pod of another
revision.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import time
from collections.abc import Callable
from typing import Any

from pko.api import conditions, names
from pko.api import workspace as ws_api
from pko.controllers.workspace import manifests, podproblems, runtime
from pko.controllers.workspace.runtime import (
    ROLLING_UPDATE,
    SERVICE_INVALID,
    STATEFULSET_INVALID,
    WAITING_FOR_REPLICAS,
    Pending,
    Placed,
    Placement,
)
from pko.kube import client as kclient
from pko.kube import errors, events, objects, owners, resources
from pko.runtime import applied, handlers, manager, store
from pko.runtime import controller as ctl

log = logging.getLogger(__name__)
RETRY_AFTER = 5.0
#: How often a Workspace whose pod is not available yet looks at the pod for a kubelet error.
POD_CHECK_AFTER = 10.0
#: How often a Workspace whose pod the API server refused looks again (a list of events each time).
REFUSED_CHECK_AFTER = 30.0
#: Ready's message while a StatefulSet is replaced because a field it cannot change in place changed.
MIGRATING = "Replacing the workspace statefulset to change a field it cannot change in place"
#: How often a Workspace whose StatefulSet or Service the API server refused tries it again, its spec unchanged.
REFUSED_RETRY_AFTER = runtime.REFUSED_RETRY_AFTER


#: How the API server refuses an object for what it says: invalid (422: its validation, and an admission policy's
#: default), forbidden (403: an admission webhook's default — Gatekeeper, Kyverno — or the operator's RBAC), or a
#: bad request (400, some webhooks). Retrying the same object every few seconds changes none of them.
_REFUSALS = (errors.Invalid, errors.Forbidden, errors.BadRequest)


class _Refused(Exception):
    """The API server refused the workspace's `kind` (Service or StatefulSet) as invalid or forbidden."""

    def __init__(self, kind: str, err: errors.ApiError) -> None:
        super().__init__(f"{kind}: {err}")
        self.kind = kind
        self.err = err


def statefulset_ready(obj: objects.Object) -> bool:
    status = obj.get("status") or {}
    return (status.get("observedGeneration") == objects.generation_of(obj)
            and status.get("updateRevision") == status.get("currentRevision")
            and (status.get("availableReplicas") or 0) >= 1)


def _rollout(obj: objects.Object) -> tuple[object, ...]:
    status = obj.get("status") or {}
    return (status.get("observedGeneration"), status.get("updateRevision"), status.get("currentRevision"),
            status.get("availableReplicas"))


def rollout_changed(event: store.Event) -> bool:
    """The reference reconciles only when the StatefulSet becomes ready; we also follow the rollout's progress,
    so the Workspace's Ready reason moves from RollingUpdate to WaitingForReplicas instead of going stale."""
    if event.type == "DELETED":
        return False
    if statefulset_ready(event.object) and (event.old is None or not statefulset_ready(event.old)):
        return True
    return event.old is not None and _rollout(event.old) != _rollout(event.object)


def pod_name(key: objects.ObjectKey) -> str:
    return names.workspace_pod_name(key.name)


class PodRuntime:
    """Runs each Workspace's agent in the pod of its StatefulSet."""

    def __init__(self, client: kclient.Client, recorder: events.Recorder,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)) -> None:
        self.client = client
        self.recorder = recorder
        self.clock = clock
        self.wall = wall
        self._pod_seen: dict[objects.ObjectKey, datetime.datetime] = {}  # when this process last saw each pod
        self._applied = applied.Applied()
        self._statefulsets: store.Store | None = None  # the StatefulSet informer's cache, once watched
        self._told_dropped: dict[objects.ObjectKey, str] = {}  # the template whose dropped image volumes were told
        self._told_no_events = False

    async def _apply(self, workspace: ws_api.Workspace, statefulset: dict[str, Any]) -> objects.Object:
        """Apply the Service and the StatefulSet, unless this process applied the same two recently and the
        StatefulSet is unchanged since (its generation in the cache): then the cached StatefulSet. A Workspace
        reconciles several times while its pod starts; the Go operator re-applies both every time. An Invalid
        refusal is raised as :class:`_Refused`, naming which of the two it was."""
        key = objects.ObjectKey.of(workspace.metadata)
        service = owners.set_controller_reference(manifests.service(workspace), workspace)
        digest = applied.digest(service, statefulset)
        cached = None
        if self._statefulsets is not None:
            cached = self._statefulsets.get(objects.ObjectKey(key.namespace, statefulset["metadata"]["name"]))
        if cached is not None and self._applied.holds(key, digest, cached, self.clock()):
            return cached
        try:
            await self.client.apply(service)
        except _REFUSALS as err:
            raise _Refused("Service", err) from err
        try:
            result = await self.client.apply(statefulset)
        except _REFUSALS as err:
            raise _Refused("StatefulSet", err) from err
        dropped = podproblems.dropped_image_volumes(statefulset, result)
        if dropped and self._told_dropped.get(key) != digest:  # once for each template, not at each re-apply
            self._told_dropped[key] = digest
            await self.recorder.warning(workspace, "ImageVolumesDropped", podproblems.dropped_message(dropped))
        self._applied.record(key, digest, result, self.clock(), statefulset)
        return result

    async def _refused(self, workspace: ws_api.Workspace, statefulset: dict[str, Any],
                       refused: _Refused) -> tuple[str, str] | None:
        """After the API server refused the Service or the StatefulSet as invalid: when a StatefulSet exists and
        the refusal is of a change to a field it cannot change in place, the reference's migration (delete it, a
        `Migrated` event, None); else the template is what it refuses (a `podTemplate` or `serviceTemplate` typo,
        an admission policy), and the reason and message to stall with are returned (a Warning event when they
        are news) — deleting a StatefulSet and applying it again every few seconds would not help, and would
        kill a pod that may be running an update. What exists stays as it is."""
        key = objects.ObjectKey.of(workspace.metadata)
        self._applied.forget(key)
        name = statefulset["metadata"]["name"]
        err = refused.err
        if refused.kind == "StatefulSet" and podproblems.immutable_change(err.details, err.message or str(err)) and (
                await self.client.get_or_none(resources.STATEFUL_SET, name, key.namespace) is not None):
            await self.client.delete(resources.STATEFUL_SET, name, key.namespace, missing_ok=True)
            await self.recorder.normal(workspace, "Migrated", "Replaced the workspace statefulset")
            return None
        reason = STATEFULSET_INVALID if refused.kind == "StatefulSet" else SERVICE_INVALID  # 403s too: its words
        message = podproblems.shortened(f"the API server refuses the workspace's {refused.kind}: {err.message or err}")
        told = conditions.find(workspace.status.conditions if workspace.status else None, conditions.STALLED)
        if told is None or told.status != "True" or told.reason != reason or told.message != message:
            await self.recorder.warning(workspace, reason, message)
        return reason, message

    async def place(self, workspace: ws_api.Workspace, statefulset: dict[str, Any]) -> Placement:
        key = objects.ObjectKey.of(workspace.metadata)
        try:
            applied = await self._apply(workspace, statefulset)
        except _Refused as refused:
            stall = await self._refused(workspace, statefulset, refused)
            if stall is not None:  # tried again now and then: an admission policy may be what changes
                return Pending(ctl.Result(requeue_after=REFUSED_RETRY_AFTER), *stall, stalled=True)
            return Pending(ctl.Result(requeue_after=RETRY_AFTER), ROLLING_UPDATE, MIGRATING)
        sts_status = applied.get("status") or {}
        generation = applied.get("metadata", {}).get("generation")
        if (sts_status.get("observedGeneration") != generation
                or sts_status.get("updateRevision") != sts_status.get("currentRevision")):
            return Pending(reason=ROLLING_UPDATE, message="Waiting for the statefulset to be updated")
        if (sts_status.get("availableReplicas") or 0) < 1:
            found = await self.client.get_or_none(resources.POD, pod_name(key), key.namespace)
            if found is not None:
                self._pod_seen[key] = self.wall()
            stuck = podproblems.problem(found)
            ready = conditions.find(workspace.status.conditions if workspace.status else None, conditions.READY)
            after = POD_CHECK_AFTER
            if found is None and ready is not None and ready.reason == WAITING_FOR_REPLICAS:
                # it waited for a missing pod at an earlier look already (right after an apply or a wake the
                # StatefulSet controller is still creating it): has the API server refused it since the wait
                # began? (Ready's transition, or later the last time this process saw the pod: a refusal told
                # before then was of an earlier pod, and Ready may have been False for other reasons long before.)
                since = conditions.parse_time(ready.last_transition_time)
                seen = self._pod_seen.get(key)
                if seen is not None and (since is None or seen > since):
                    since = seen
                stuck = await self._refusal(applied, since=conditions.format_time(since) if since else None)
                after = REFUSED_CHECK_AFTER if stuck else after
            if manifests.AGENT_VOLUME in podproblems.dropped_image_volumes(statefulset, applied):
                stuck = podproblems.dropped_message([manifests.AGENT_VOLUME]) + (f"; {stuck}" if stuck else "")
            message = "Waiting for the workspace pod to be available" + (f": {stuck}" if stuck else "")
            told = ready.message if ready is not None and ready.reason == WAITING_FOR_REPLICAS else None
            if stuck and podproblems.same_refusal(told, message):
                message = told or message  # the same refusal with other figures: no new event, no new write
            elif stuck:
                await self.recorder.warning(workspace, "PodFailure", message)
            # a pod that cannot start changes no StatefulSet field we watch: look again for what the kubelet says
            return Pending(ctl.Result(requeue_after=after), WAITING_FOR_REPLICAS, message)
        pod = await self.client.get(resources.POD, pod_name(key), key.namespace)
        self._pod_seen[key] = self.wall()
        if objects.labels_of(pod).get("controller-revision-hash") != sts_status.get("currentRevision"):
            return Pending(ctl.Result(requeue=True))
        initialized = objects.annotations_of(pod).get(names.ANNOTATION_INITIALIZED, "").lower() == "true"

        async def mark() -> bool:
            try:
                await self.client.patch(resources.POD, pod_name(key), {
                    "metadata": {"annotations": {names.ANNOTATION_INITIALIZED: "true"},
                                 "resourceVersion": objects.resource_version_of(pod)}}, key.namespace)
                return True
            except errors.ApiError:
                await self.client.delete(resources.POD, pod_name(key), key.namespace, missing_ok=True)
                return False

        return Placed(manifests.service_address(workspace), initialized, mark, fetch_seconds=fetch_seconds(pod))

    async def _refusal(self, statefulset: objects.Object, since: str | None) -> str | None:
        """Why the StatefulSet controller could not create the pod since the Workspace began to wait (its
        `FailedCreate` events, read from the API server: the operator watches no events); None when it says
        nothing, or may not be asked."""
        meta = statefulset.get("metadata") or {}
        try:
            found = await self.client.list(resources.EVENT, meta.get("namespace"), fields={
                "involvedObject.kind": "StatefulSet", "involvedObject.name": meta.get("name", ""),
                "reason": podproblems.FAILED_CREATE})
        except errors.ApiError as err:  # an older Role without `list` on events: the Workspace waits, as before
            if not self._told_no_events:
                self._told_no_events = True
                log.warning("cannot read why a workspace pod was not created (statefulset %s): %s",
                            meta.get("name"), err)
            return None
        return podproblems.refused(found.items, meta.get("uid", ""), since)

    async def sleep(self, workspace: ws_api.Workspace, statefulset: dict[str, Any]) -> None:
        """Apply the Service and the StatefulSet with no replicas: the StatefulSet controller stops the pod (the
        agent gets SIGTERM and its grace period); the template stays, so waking makes the same pod again. When the
        API server refuses the new template, the StatefulSet that exists is scaled to zero as it is (the next
        :meth:`place` says why it cannot wake): the pod stops either way, and no event claims a migration."""
        try:
            await self._apply(workspace, statefulset)
        except _Refused:
            key = objects.ObjectKey.of(workspace.metadata)
            self._applied.forget(key)
            with contextlib.suppress(errors.NotFound):
                await self.client.patch(resources.STATEFUL_SET, statefulset["metadata"]["name"],
                                        {"spec": {"replicas": 0}}, key.namespace)

    async def stopped(self, key: objects.ObjectKey) -> bool:
        """The workspace pod is gone (a pod terminating after the scale to zero still holds its node's room)."""
        return await self.client.get_or_none(resources.POD, pod_name(key), key.namespace) is None

    async def remove(self, key: objects.ObjectKey) -> None:
        """Nothing to delete: the StatefulSet and Service are owned by the Workspace (garbage collection)."""
        self._applied.forget(key)
        self._told_dropped.pop(key, None)
        self._pod_seen.pop(key, None)

    def watch(self, mgr: manager.Manager, controller: ctl.Controller) -> None:
        informer = mgr.informer(resources.STATEFUL_SET)
        self._statefulsets = informer.store
        controller.watch(informer, handlers.for_controller(resources.WORKSPACE), rollout_changed)

    async def close(self) -> None:
        """Nothing to stop: the pods outlive the operator."""


def fetch_seconds(pod: dict[str, Any]) -> float | None:
    """How long the pod's ``fetch`` init container ran (the kubelet's start and finish times, whole seconds), or
    None when it has not finished successfully."""
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if status.get("name") != "fetch":
            continue
        done = (status.get("state") or {}).get("terminated") or {}
        started = conditions.parse_time(done.get("startedAt"))
        finished = conditions.parse_time(done.get("finishedAt"))
        if done.get("exitCode") == 0 and started is not None and finished is not None:
            return max(0.0, (finished - started).total_seconds())
    return None
