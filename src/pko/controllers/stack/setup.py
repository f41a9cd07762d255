"""Wiring of the Stack controller into a manager: its watches, indexes, lazily watched Flux kinds, and metrics.

A Stack is reconciled when its generation changes (not when only our finalizer was added) or its
reconciliation-request annotation changes; when a prerequisite becomes ready or goes away; when a Program or
Flux source it uses gets a new artifact; when its Workspace becomes ready or stalled; and when one of its Updates
completes. Metrics `stacks_active` and `stacks_failing{namespace,name}` follow the Stack cache, and so does pko's
`pulumi_stack_last_success_timestamp_seconds` after a restart (seeded from `status.lastUpdate`),
`pulumi_stack_stalled{namespace,stack,reason}` and the drift-check metrics (driftmetrics.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from pko.api import conditions, lanes, names
from pko.api import stack as stack_api
from pko.api.meta import Condition
from pko.controllers.settings import Settings
from pko.controllers.stack import driftmetrics, outputrefs, restart, sync
from pko.controllers.stack import reconciler as stack_reconciler
from pko.controllers.stack import source as source_mod
from pko.kube import client as kclient
from pko.kube import events, objects, resources
from pko.runtime import controller as ctl
from pko.runtime import handlers, informer, manager, metrics, store

log = logging.getLogger(__name__)

PREREQUISITE_INDEX = "spec.prerequisites.name"
PROGRAM_INDEX = ".spec.programRef.name"
FLUX_INDEX = ".spec.fluxSource.sourceRef"
OUTPUT_REFS_INDEX = ".spec.outputRefs[].stackName"  # pko (docs/stack-dependencies.md)


def _prerequisites(obj: objects.Object) -> list[str]:
    return [str(p.get("name")) for p in (obj.get("spec") or {}).get("prerequisites") or [] if p.get("name")]


def _program(obj: objects.Object) -> list[str]:
    ref = (obj.get("spec") or {}).get("programRef") or {}
    return [str(ref["name"])] if ref.get("name") else []


def flux_key(api_version: str, kind: str, name: str) -> str:
    return f"{objects.group_of(api_version)}/{kind}:{name}"


def _flux(obj: objects.Object) -> list[str]:
    ref = ((obj.get("spec") or {}).get("fluxSource") or {}).get("sourceRef") or {}
    if not ref.get("kind") or not ref.get("name"):
        return []
    return [flux_key(str(ref.get("apiVersion", "")), str(ref["kind"]), str(ref["name"]))]


def _annotation(obj: objects.Object) -> str:
    return objects.annotations_of(obj).get(names.ANNOTATION_RECONCILE_REQUEST, "")


def _finalizer_added(event: store.Event) -> bool:
    if event.type != "MODIFIED" or event.old is None:
        return False
    old = event.old["metadata"].get("finalizers") or []
    new = event.object["metadata"].get("finalizers") or []
    return names.FINALIZER not in old and names.FINALIZER in new


def _confirmation(obj: objects.Object) -> str:
    """pko destroy protection: the digest the confirm-destroy annotation names (docs/destroy-protection.md)."""
    return objects.annotations_of(obj).get(names.ANNOTATION_CONFIRM_DESTROY, "")


def stack_predicate(event: store.Event) -> bool:
    if event.type == "MODIFIED" and event.old is not None and _annotation(event.object) != _annotation(event.old):
        return True
    if (event.type == "MODIFIED" and event.old is not None
            and _confirmation(event.object) != _confirmation(event.old)):
        return True
    return handlers.generation_changed(event) and not _finalizer_added(event)


def _transition(test: Callable[[objects.Object], bool]) -> handlers.Predicate:
    def predicate(event: store.Event) -> bool:
        if event.type == "DELETED":
            return True
        return test(event.object) and (event.old is None or not test(event.old))
    return predicate


def _revision(obj: objects.Object) -> str | None:
    artifact = (obj.get("status") or {}).get("artifact") or {}
    return artifact.get("revision") if isinstance(artifact, dict) else None


def revision_changed(event: store.Event) -> bool:
    if event.type == "DELETED":
        return False
    revision = _revision(event.object)
    return revision is not None and (event.old is None or _revision(event.old) != revision)




def _stack_owners(obj: objects.Object) -> list[objects.ObjectKey]:
    return [objects.ObjectKey(objects.namespace_of(obj), str(ref.get("name")))
            for ref in obj["metadata"].get("ownerReferences") or []
            if ref.get("kind") == stack_api.KIND and objects.group_of(str(ref.get("apiVersion", ""))) == "pulumi.com"]


def _approved_stack(obj: objects.Object) -> list[objects.ObjectKey]:
    """A StackApproval (pko, docs/approvals.md) brings back the Stack it names, in its namespace."""
    name = (obj.get("spec") or {}).get("stackName")
    return [objects.ObjectKey(objects.namespace_of(obj), str(name))] if name else []


# --- what brings a Stack back: the mappings and predicates of its watches --------------------------------------

def _users(stacks: store.Store, index: str, obj: objects.Object) -> list[objects.ObjectKey]:
    return [objects.key_of(s) for s in stacks.by_index(index, objects.name_of(obj))
            if objects.namespace_of(s) == objects.namespace_of(obj)]


def dependents(stacks: store.Store, obj: objects.Object) -> list[objects.ObjectKey]:
    """The Stacks of `obj`'s namespace that name the Stack `obj` as a prerequisite."""
    return _users(stacks, PREREQUISITE_INDEX, obj)


def _output_refs(obj: objects.Object) -> list[str]:
    return sorted(outputrefs.upstreams_of_object(obj))


def output_readers(stacks: store.Store, obj: objects.Object) -> list[objects.ObjectKey]:
    """The Stacks of `obj`'s namespace that read outputs of the Stack `obj` (pko `outputRefs`)."""
    return _users(stacks, OUTPUT_REFS_INDEX, obj)


def outputs_may_have_changed(event: store.Event) -> bool:
    """A Stack appeared or went, finished an update, or changed its own references: the Stacks that read its
    outputs look again (an update whose outputs are the same changes no digest, so it starts nothing; changed
    references may make or break a cycle)."""
    if event.type != "MODIFIED" or event.old is None:
        return True

    def last(obj: objects.Object) -> Any:
        return ((obj.get("status") or {}).get("lastUpdate") or {}).get("name")

    def refs(obj: objects.Object) -> Any:
        return (obj.get("spec") or {}).get("outputRefs")
    return bool(last(event.object) != last(event.old) or refs(event.object) != refs(event.old))


def program_users(stacks: store.Store, obj: objects.Object) -> list[objects.ObjectKey]:
    """The Stacks of `obj`'s namespace that run the Program `obj`."""
    return _users(stacks, PROGRAM_INDEX, obj)


def workspace_signal(obj: objects.Object) -> bool:
    """The Workspace is ready (:func:`steps.workspace_ready`), or stalled: either is news for its Stack. Read from
    the wire object, as every predicate here: it runs for each event of every Workspace, and a model of the whole
    object for one condition was most of a predicate's work."""
    meta = objects.metadata(obj)
    ready = (not meta.get("deletionTimestamp")
             and (obj.get("status") or {}).get("observedGeneration") == (meta.get("generation") or 0)
             and objects.condition_true(obj, conditions.READY))
    return ready or objects.condition_true(obj, conditions.STALLED)


def update_finished(obj: objects.Object) -> bool:
    """:func:`steps.update_finished`, read from the wire object."""
    return objects.condition_true(obj, conditions.COMPLETE)


def workspace_problem(obj: objects.Object | None) -> str:
    """What the Stack shows of its Workspace while waiting for it (that it waits in the pool's queue, not its place
    there, which moves; or what is stuck)."""
    if obj is None:
        return ""
    found = ((obj.get("status") or {}).get("conditions") or [])
    ready = next((c for c in found if isinstance(c, dict) and c.get("type") == conditions.READY), None)
    if ready is not None and ready.get("reason") == conditions.QUEUED:  # pko: waiting in the pool's queue
        return f"{conditions.QUEUED}: {lanes.queued_summary(str(ready.get('message') or ''))}"
    return sync.waiting_for_workspace_message(Condition.model_validate(ready) if ready else None)


def workspace_changed(event: store.Event) -> bool:
    """The Workspace became ready or stalled, or what it says is stuck (or that it waits in the pool's queue, and
    in which lane) changed (shown on the Stack).

    A Workspace seen for the first time that shows nothing but plain waiting is no news: the Stack that applied it
    is reconciling already (it shows that waiting itself), and at the operator's start every Stack is reconciled
    anyway. That was one reconcile in six of every new Stack's."""
    if _transition(workspace_signal)(event):
        return True
    if event.type == "DELETED":
        return False
    shown = workspace_problem(event.object)
    if event.old is None:
        return shown != conditions.MESSAGE_WAITING_FOR_WORKSPACE
    return shown != workspace_problem(event.old)


def _observed(obj: objects.Object) -> tuple[object, object]:
    """What :class:`StackMetrics` reads of a Stack: its last update and its conditions."""
    status = obj.get("status") or {}
    return status.get("lastUpdate"), status.get("conditions")


class StackMetrics:
    """`stacks_active` and `stacks_failing{namespace,name}`, as the reference exports them."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.pulumi = metrics.pulumi(registry)
        self.active = Gauge("stacks_active", "Number of stacks currently tracked by the Pulumi Kubernetes Operator",
                            registry=registry)
        self.failing = Gauge("stacks_failing", "Number of stacks currently registered where the last reconcile failed",
                             ["namespace", "name"], registry=registry)
        self._known: set[objects.ObjectKey] = set()

    def observe(self, event: store.Event) -> None:
        key = event.key
        if event.type == "DELETED":
            self._known.discard(key)
            with contextlib.suppress(KeyError):
                self.failing.remove(key.namespace, key.name)
            self.pulumi.forget_stack(key.namespace, key.name)
        else:
            if event.type == "MODIFIED" and event.old is not None and _observed(event.old) == _observed(event.object):
                return  # a Stack already counted, and most writes of its status change nothing the series read
            self._known.add(key)
            last = (event.object.get("status") or {}).get("lastUpdate") or {}
            self.failing.labels(key.namespace, key.name).set(1 if last.get("state") == stack_api.STATE_FAILED else 0)
            # pko: after a restart, the last success the Stack recorded seeds pulumi_stack_last_success_*
            recorded = conditions.parse_time(last.get("lastResyncTime"))
            if last.get("state") == stack_api.STATE_SUCCEEDED and recorded is not None and last.get("type"):
                self.pulumi.succeeded_at(key.namespace, key.name, str(last["type"]), recorded.timestamp())
            stalled = next((c for c in (event.object.get("status") or {}).get("conditions") or []
                            if c.get("type") == conditions.STALLED and c.get("status") == "True"), None)
            self.pulumi.stack_stalled(key.namespace, key.name, str(stalled.get("reason") or "") if stalled else None)
        self.active.set(len(self._known))


@dataclass
class FluxWatches:
    """Informers for Flux source kinds, started the first time a Stack names the kind."""

    client: kclient.Client
    namespace: str | None
    stacks: informer.Informer
    enqueue: Callable[[objects.ObjectKey], None]
    tasks: dict[resources.Kind, asyncio.Task[None]] = field(default_factory=dict)

    def ensure(self, kind: resources.Kind) -> None:
        if kind in self.tasks:
            return
        source = informer.Informer(self.client, kind, namespace=self.namespace)

        def handle(event: store.Event) -> None:
            if not revision_changed(event):
                return
            key = flux_key(kind.api_version, kind.kind, objects.name_of(event.object))
            for stack in self.stacks.store.by_index(FLUX_INDEX, key):
                if objects.namespace_of(stack) == objects.namespace_of(event.object):
                    self.enqueue(objects.key_of(stack))

        source.add_handler(handle)
        log.info("watching Flux source kind %s", kind)
        self.tasks[kind] = asyncio.get_running_loop().create_task(source.run(), name=f"informer-{kind.kind}")

    async def close(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)


@dataclass
class ApprovalWatch:
    """The StackApproval informer (pko, docs/approvals.md), started the first time a Stack with `spec.approval` or
    `spec.destroyProtection` needs it: an operator whose Stacks use neither never lists StackApprovals (it runs as
    the Go operator does, even where only the Go operator's CRDs are installed)."""

    client: kclient.Client
    namespace: str | None
    enqueue: Callable[[objects.ObjectKey], None]
    task: asyncio.Task[None] | None = None

    def ensure(self) -> None:
        if self.task is not None:
            return
        source = informer.Informer(self.client, resources.STACK_APPROVAL, namespace=self.namespace)

        def handle(event: store.Event) -> None:
            for key in _approved_stack(event.object):
                self.enqueue(key)

        source.add_handler(handle)
        log.info("watching StackApprovals")
        self.task = asyncio.get_running_loop().create_task(source.run(), name="informer-StackApproval")

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


def retry_policy(settings: Settings) -> sync.RetryPolicy:
    """The operator-wide failure policy from the settings; each one left unset keeps the reference's value."""
    default = sync.DEFAULT_POLICY
    return sync.RetryPolicy(
        max_failures=default.max_failures if settings.max_update_failures is None else settings.max_update_failures,
        backoff_base=settings.retry_backoff_base or default.backoff_base,
        backoff_factor=settings.retry_backoff_factor or default.backoff_factor,
        max_backoff=settings.retry_max_backoff or default.max_backoff,
        stalled_retry_interval=settings.stalled_retry_interval or default.stalled_retry_interval,
    )


@dataclass
class StackController:
    reconciler: stack_reconciler.StackReconciler
    controller: ctl.Controller
    metrics: StackMetrics
    flux: FluxWatches
    approvals: ApprovalWatch | None = None

    async def close(self) -> None:
        await self.flux.close()
        if self.approvals is not None:
            await self.approvals.close()


def setup(mgr: manager.Manager, client: kclient.Client, settings: Settings) -> StackController:
    """Register the Stack controller on `mgr`."""
    workers = settings.workers
    stacks = mgr.informer(resources.STACK, indexers={
        PREREQUISITE_INDEX: _prerequisites, PROGRAM_INDEX: _program, FLUX_INDEX: _flux,
        OUTPUT_REFS_INDEX: _output_refs,
    })
    recorder = events.Recorder(client, names.STACK_CONTROLLER)
    flux_watches: FluxWatches | None = None

    def watch_flux(kind: resources.Kind) -> None:
        if flux_watches is not None:
            flux_watches.ensure(kind)

    resolver = source_mod.Resolver(client, watch_flux_kind=watch_flux, git_timeout=settings.git_timeout,
                                   github_api_url=settings.github_api_url)
    approval_watch: ApprovalWatch | None = None

    def watch_approvals() -> None:
        if approval_watch is not None:
            approval_watch.ensure()

    reconciler = stack_reconciler.StackReconciler(client, recorder, resolver, retry_policy=retry_policy(settings),
                                                  min_resync=settings.min_resync, watch_approvals=watch_approvals)
    reconciler.shard = settings.shard
    reconciler.lease_namespace = settings.operator_namespace if settings.leader_elect else None
    reconciler.fleet_size = lambda: len(stacks.store)
    reconciler.namespace_stacks = stacks.store.list
    reconciler.first_looks = restart.FirstLooks(settings.restart_spread)
    controller = mgr.controller(names.STACK_CONTROLLER, reconciler, workers=workers)
    flux_watches = FluxWatches(client, mgr.namespace, stacks, lambda key: controller.queue.add(key))
    approval_watch = ApprovalWatch(client, mgr.namespace, lambda key: controller.queue.add(key))

    controller.watch(stacks, predicate=stack_predicate)

    controller.watch(stacks, handlers.for_mapping(functools.partial(dependents, stacks.store)),
                     _transition(stack_api.up_to_date))
    controller.watch(stacks, handlers.for_mapping(functools.partial(output_readers, stacks.store)),
                     outputs_may_have_changed)
    controller.watch(mgr.informer(resources.PROGRAM), handlers.for_mapping(functools.partial(program_users,
                                                                                             stacks.store)),
                     revision_changed)
    controller.watch(mgr.informer(resources.WORKSPACE), handlers.for_controller(resources.STACK), workspace_changed)
    controller.watch(mgr.informer(resources.UPDATE), handlers.for_mapping(_stack_owners),
                     _transition(update_finished))

    metrics = StackMetrics(mgr.registry)
    stacks.add_handler(metrics.observe)
    stacks.add_handler(driftmetrics.DriftMetrics(mgr.registry).observe)
    return StackController(reconciler, controller, metrics, flux_watches, approval_watch)
