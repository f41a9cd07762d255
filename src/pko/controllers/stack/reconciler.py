"""The Stack reconciler: the executor around the pure rules in `steps`, `sync`, `workspace`, `updates` and `source`.

One pass follows pko-v2 §3.1 step by step: record the observed generation and request, keep the finalizer,
absorb a finished Update, resolve the source, build the Workspace, decide whether an update is due, check
prerequisites, apply the Workspace, wait for it, then save `currentUpdate` *before* creating the Update (so a
crash in between never loses track of it). Where the pass forks, :mod:`steps` decides and a ``match`` here runs
the answer. Status is written by server-side apply with the reference's field manager; every stall carries the
reference's reason and message and, where the reference does, an event.

A Stack with pko's `spec.approval.required` runs each update in two steps (rules in :mod:`approval`): a preview
that saves its plan, then — once a StackApproval names the plan's digest — an `up` bound to that plan.

A suspended Stack (pko's `spec.suspend`) stops right after absorbing a finished Update: it resolves no source and
starts nothing until resumed. A deleting one is not suspended: the finalizer runs as for any other Stack.

pko's drift checks (`spec.driftDetection`, rules in `drift`) take the path of an update when one is due and nothing
else is: the Workspace, then a labelled preview Update tracked in `status.drift.currentCheck` (never in
`currentUpdate`, so `lastUpdate` keeps its meaning). A check in flight is waited for exactly like an update.

Each object is read once into its typed model (:mod:`pko.api`) and worked on as that; JSON is built only for what
goes back to the API server (a status apply, a finalizer patch, a new Update).

Must never: put secret values into status, events or logs (outputs are masked), or drop the finalizer while a
destroy it promised has not succeeded.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pko.api import approval as approval_api
from pko.api import conditions, lanes, names
from pko.api import stack as stack_api
from pko.api import update as up_api
from pko.api import workspace as ws_api
from pko.api.meta import Condition
from pko.controllers.stack import (
    announce,
    drift,
    outputrefs,
    outputs,
    publish,
    restart,
    shardmove,
    steps,
    sync,
    ttl,
    updates,
)
from pko.controllers.stack import approval as gate
from pko.controllers.stack import source as source_mod
from pko.controllers.stack import workspace as ws_build
from pko.kube import client as kclient
from pko.kube import errors, events, objects, resources
from pko.runtime import applied, logcontext, sharding
from pko.runtime.controller import Result

log = logging.getLogger(__name__)

NAMESPACE_TERMINATING_RETRY = 30.0
OUTPUT_REF_CYCLE_RETRY = 300.0  # a Stack stalled on an outputRefs cycle looks again (a change of any Stack of it)
#: However unchanged, a Stack's Workspace is applied again after this long. Everything an apply sets on it shows in
#: the cache (its spec by the generation, its labels, annotations and owner by the metadata: pko.runtime.applied),
#: so this is only a safety net; at the shorter default, a Stack queued behind a pool for minutes applied its
#: Workspace twice (1.5 applies a Stack at 1,000 Stacks), and every settled Stack again at each resync.
WORKSPACE_REAPPLY_AFTER = 3600.0


@dataclass
class _Session:
    """The Stack being reconciled and the status being built for it."""

    stack: stack_api.Stack
    status: stack_api.StackStatus
    conditions: list[Condition] = field(default_factory=list)
    finalize_update: str | None = None  # an absorbed Update whose finalizer goes after the next status save
    waiting: up_api.Update | None = None  # the current Update, while it has not completed
    recheck_after: float | None = None  # when to look again for a current Update the API server does not have
    gave_up: str | None = None  # a current Update the API server never had, given up this time
    saved: dict[str, Any] | None = None  # the status last written in this reconcile

    @property
    def key(self) -> objects.ObjectKey:
        return objects.ObjectKey.of(self.stack.metadata)

    @property
    def deleting(self) -> bool:
        return bool(self.stack.metadata.deletion_timestamp)


@dataclass
class _Due:
    """An update that is due: what the pass learnt on its way to starting it."""

    commit: str
    carried: outputrefs.Carried | None
    due: steps.Due
    destroying: bool  # pko destroy protection: the update is a destroy that needs its confirmation
    inputs: gate.Inputs  # what an approval is for
    approval: gate.Step | None = None  # a gated Stack's step: a plan preview, or the `up` of an approved plan


#: The answers by which the API server surely did not create an object (anything else may have made it).
_REFUSED = (errors.BadRequest, errors.Unauthorized, errors.Forbidden, errors.NotFound, errors.Invalid)


class StackReconciler:
    def __init__(
        self,
        client: kclient.Client,
        recorder: events.Recorder,
        resolver: source_mod.Resolver,
        *,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
        retry_policy: sync.RetryPolicy = sync.DEFAULT_POLICY,
        min_resync: float = sync.MIN_RESYNC,
        watch_approvals: Callable[[], None] = lambda: None,
    ) -> None:
        self.client = client
        self.recorder = recorder
        self.resolver = resolver
        self.clock = clock
        self.retry_policy = retry_policy  # the operator-wide failure policy; a Stack's retryPolicy overrides it
        self.min_resync = min_resync  # the floor under a Stack's resyncFrequencySeconds (--min-resync-frequency)
        self.watch_approvals = watch_approvals  # starts the StackApproval watch, once a Stack needs it
        # the Workspaces this process applied (skips applies that change nothing)
        self._applied = applied.Applied(WORKSPACE_REAPPLY_AFTER)
        self.shard = sharding.EVERYTHING  # pko: the Stacks this operator reconciles (--shard-key)
        #: pko: where the shards' leader-election Leases are (None: leader election is off, nothing tells that a
        #: shard is gone)
        self.lease_namespace: str | None = None
        self.fleet_size: Callable[[], int] = lambda: 0  # how many Stacks this operator has (restart.window)
        #: the cached Stacks of a namespace (the informer's store; None: list them live), for outputRefs' cycles
        self.namespace_stacks: Callable[[str], list[objects.Object]] | None = None
        self.first_looks = restart.FirstLooks()  # the spread of the first looks at settled Stacks after a start
        self.verified: set[objects.ObjectKey] = set()  # ... and reconciled past their first look's delay
        self.announced = announce.Announced()  # the update each Stack was told of (StackUpdateDetected)

    def _policy(self, stack: stack_api.Stack) -> sync.RetryPolicy:
        return sync.stack_policy(stack, defaults=self.retry_policy)

    async def __call__(self, key: objects.ObjectKey) -> Result | None:
        found = await self.client.get_or_none(resources.STACK, key.name, key.namespace)
        stack = None if found is None else stack_api.Stack.model_validate(found)
        if stack is None or not self.shard.owns_labels(stack.metadata.labels):
            self.first_looks.forget(key.namespace, key.name)
            self.verified.discard(key)
            self.announced.forget(key)
            return None  # gone, or another shard's (pko.runtime.sharding)
        wait = self.first_looks.wait(stack, self.fleet_size(), time.monotonic())  # restart.py
        if wait is not None:
            return Result(requeue_after=wait)
        self.verified.add(key)
        # the status this pass builds, apart from the one read (what a write is compared with): validated again
        # from a copy of what was read, several times cheaper than a deep copy of the model
        assert found is not None
        status = stack_api.StackStatus.model_validate(objects.copy_decoded(found.get("status") or {}))
        status.observed_generation = stack.metadata.generation
        status.observed_reconcile_request = sync.reconcile_request(stack)
        if status.current_update is not None and status.current_update.name:
            logcontext.bind(update=status.current_update.name)
        s = _Session(stack, status, list(status.conditions or []))
        finalizers = list(stack.metadata.finalizers or [])
        if s.deleting and names.FINALIZER not in finalizers:
            return None
        if not s.deleting and names.FINALIZER not in finalizers:
            s.stack = stack = await self._write_finalizers(stack, [*finalizers, names.FINALIZER])

        if not self.shard.everything:
            wait = await self._claim(s)
            if wait is not None:
                return Result(requeue_after=wait)

        expiry = ttl.Expiry()
        if not s.deleting and not sync.is_suspended(stack):  # a suspended Stack expires once resumed
            expiry = ttl.plan(stack, self.clock())
            if expiry.expired:
                await self._expire(s, expiry)
                return None  # its deletion brings it back: the finalizer destroys
        result = await self._reconcile(s)
        if expiry.wait is None or (result is not None and result.requeue):  # a rate-limited retry comes sooner
            return result
        return Result(requeue_after=ttl.sooner(expiry.wait, result.requeue_after if result else None))

    async def _reconcile(self, s: _Session) -> Result | None:
        """The rest of the pass once the Stack is known to be looked at now and its TTL has not passed (the
        module's doc): absorb what finished, then the road :func:`steps.entry` picks."""
        absorbed = s.status.current_update is not None
        if absorbed and not await self._absorb(s):
            if s.recheck_after is not None:
                return Result(requeue_after=s.recheck_after)
            await self._refresh_stuck_workspace(s)
            return None  # the Update is still running; its completion brings us back
        absorbed = absorbed and s.gave_up is None
        if drift.in_flight(s.status) and not await self._absorb_check(s):
            return None  # a drift check holds the stack; nothing starts until it ends
        entry = steps.entry(s.stack, s.status, s.conditions)
        if entry.forget_drift:
            s.conditions = drift.forget(s.status, s.conditions)
        if entry.resumed:
            await self.recorder.normal(s.stack, "StackResumed", "Stack resumed (spec.suspend is no longer true)")
        resolved: source_mod.Resolved | source_mod.Unavailable
        match entry.begin:
            case steps.Begin.RELEASE:
                s.conditions = conditions.mark_ready(s.conditions, now=self.clock())
                await self._save(s)
                await self._remove_finalizer(s)
                return None
            case steps.Begin.SUSPEND:
                await self._suspended(s, absorbed)
                return None
            case steps.Begin.INVALID:
                return await self._stall(s, conditions.STALLED_SPEC_INVALID, steps.CONFIG_INVALID_MESSAGE, True, None)
            case steps.Begin.FROM_STATUS:
                assert s.status.project_info is not None
                resolved = source_mod.Resolved(
                    ws_build.Source(project_info=s.status.project_info.to_wire()), "")
            case steps.Begin.RESOLVE:
                resolved = await self.resolver.resolve(s.stack)
        if isinstance(resolved, source_mod.Unavailable):
            return await self._stall(s, resolved.reason, resolved.message, resolved.event, resolved.requeue_after)
        return await self._run(s, resolved)

    async def _run(self, s: _Session, resolved: source_mod.Resolved) -> Result | None:
        """From a resolved source: the values `outputRefs` read, the Workspace, and what runs next
        (:func:`steps.due`)."""
        spec = stack_api.spec_of(s.stack)
        carried: outputrefs.Carried | None = None
        if spec.output_refs and not s.deleting:
            wired = await self._wire_outputs(s)
            if not isinstance(wired, outputrefs.Carried):
                return wired  # waiting for an output, or a cycle (status saved)
            carried = wired
        elif spec.output_refs and spec.run_program:  # a destroy that runs the program: the values it last ran with
            carried = await self._carried_by(s)
        try:
            desired_ws = ws_build.desired(s.stack, resolved.source, carried, shard=self.shard)
        except ws_build.StallError as err:
            return await self._stall(s, conditions.STALLED_SPEC_INVALID, str(err), True, None)
        due = steps.due(s.stack.model_copy(update={"status": s.status}), s.conditions, resolved.commit, self.clock(),
                        defaults=self.retry_policy, min_resync=self.min_resync,
                        output_refs=carried.digests if carried is not None else None)
        match due.next:
            case steps.Next.SYNCED:
                return await self._synced(s, objects.name_of(desired_ws), due.schedule)
            case steps.Next.CHECK:  # on the path of an update (the Workspace first); the Stack reads as synced
                assert s.status.last_update is not None
                s.conditions = sync.mark_result(s.conditions, s.status.last_update, self.clock(),
                                                policy=self._policy(s.stack))
                ws = await self._place(s, desired_ws, check=True)
                if isinstance(ws, ws_api.Workspace):
                    await self._start_check(s, ws, self.clock())
                    return None
                return ws
            case steps.Next.UPDATE:
                destroying = gate.destroy_protected(s.stack)
                inputs = gate.Inputs(s.stack.metadata.generation, sync.reconcile_request(s.stack), resolved.commit,
                                     "destroy" if destroying else "update",
                                     carried.revision if carried is not None else "")
                return await self._update(s, desired_ws, _Due(resolved.commit, carried, due, destroying, inputs))

    async def _update(self, s: _Session, desired_ws: objects.Object, run: _Due) -> Result | None:
        """An update is due: the approval a gated Stack needs, `StackUpdateDetected` once, the prerequisites,
        then the Workspace and the Update (its name saved in status first)."""
        if gate.gated(s.stack):  # a drift check is a preview and needs no approval; a remediation does
            run.approval = step = await self._approval_step(s, run.inputs, run.destroying)
            match step.action:
                case gate.Action.WAIT:
                    assert s.status.approval is not None
                    s.conditions = gate.mark_awaiting(s.conditions, s.status.approval, s.key.name, self.clock())
                    await self._save(s)
                    return None
                case gate.Action.STALL:
                    message = gate.unsupported_destroy_message() if run.destroying else gate.unsupported_message()
                    return await self._stall(s, gate.STALLED_PLANS_UNSUPPORTED, message, True, None)
                case gate.Action.PREVIEW if s.status.approval and s.status.approval.state == gate.AWAITING:
                    await self.recorder.normal(s.stack, "StackApprovalStale",
                                               f"plan {s.status.approval.digest} is stale ({step.why}): "
                                               "previewing anew")
        if self.announced.first(s.key, s.stack, s.status, run.due.message):
            await self.recorder.normal(s.stack, "StackUpdateDetected", run.due.message)
        if not s.deleting:
            blocked = await self._prerequisites(s)
            if blocked is not None:
                s.conditions = conditions.mark_reconciling(
                    s.conditions, conditions.RECONCILING_PREREQUISITE_NOT_SATISFIED, blocked, now=self.clock())
                await self._save(s)
                return None
        s.conditions = conditions.mark_reconciling(s.conditions, *steps.waiting_shown(s.conditions), now=self.clock())
        await self._save(s)
        ws = await self._place(s, desired_ws, check=False)
        if not isinstance(ws, ws_api.Workspace):
            return ws
        await self._start_update(s, ws, run)
        return None

    async def _place(self, s: _Session, desired: objects.Object, *, check: bool) -> ws_api.Workspace | Result | None:
        """Apply the Workspace, and the Workspace when it is ready; else what the pass returns while it is not
        (:func:`steps.placed`): waiting for it, or stalled on it."""
        try:
            ws = await self._apply_workspace(s.key, desired)
        except errors.ApiError as err:
            if s.deleting and _namespace_terminating(err):
                message = (f"namespace {s.key.namespace} is terminating; the stack cannot be destroyed. To remove "
                           f"the Stack without destroying its resources: kubectl patch stack {s.key.name} -n "
                           f"{s.key.namespace} --type=merge -p '{{\"metadata\":{{\"finalizers\":[]}}}}'")
                return await self._stall(s, conditions.STALLED_NAMESPACE_TERMINATING, message, False,
                                         NAMESPACE_TERMINATING_RETRY)
            raise
        placed = steps.placed(ws, check=check, deleting=s.deleting, ever_updated=s.status.last_update is not None)
        match placed.then:
            case steps.Then.START:
                return ws
            case steps.Then.WAIT:
                if placed.show_problem:  # a drift check leaves Ready/Reconciling alone
                    await self._show_workspace_problem(s, ws)
                return None  # the Workspace watch brings us back when it is ready
            case steps.Then.CHECK_FAILED:
                await self._check_done(s, drift.failed_to_start(s.status, placed.message, self.clock()))
                await self._save(s)
                return None
            case steps.Then.RELEASE:
                await self._remove_finalizer(s)
                return None
            case steps.Then.STALL:  # a branch's next commit may fix what broke the workspace: keep polling
                return await self._stall(s, placed.reason, placed.message, False,
                                         sync.branch_poll(stack_api.spec_of(s.stack), self.min_resync))

    async def _start_update(self, s: _Session, ws: ws_api.Workspace, run: _Due) -> None:
        """Build the Update (a plan preview or a plan-bound `up` for a gated Stack), name it in status, create it."""
        now = self.clock()
        s.conditions = conditions.mark_reconciling(s.conditions, conditions.RECONCILING_PROCESSING,
                                                   conditions.MESSAGE_STACK_PROCESSING, now=now)
        update = updates.build(s.stack, ws, run.due.message, int(now.timestamp() * 1000), shard=self.shard)
        drift.with_refresh(update, s.stack, s.conditions)
        step = run.approval
        if step is not None and step.action == gate.Action.PREVIEW:
            update = gate.destroy_preview(update) if run.destroying else gate.plan_preview(update)
            s.status.approval = gate.previewing(objects.name_of(update), run.inputs)
        elif step is not None and step.action == gate.Action.APPLY:
            assert s.status.approval is not None
            if not run.destroying:  # a destroy has no plan file: the confirmation names what its preview would delete
                assert step.approval is not None
                update = gate.plan_up(update, s.status.approval.digest or "")
            s.status.approval = gate.approved(s.status.approval, step.approval, step.why)
        s.status.current_update = stack_api.CurrentStackUpdate(
            # an empty request is left out, as the Go operator's `omitempty` leaves it out
            generation=s.stack.metadata.generation, reconcile_request=sync.reconcile_request(s.stack) or None,
            name=objects.name_of(update), commit=run.commit,
            output_refs=run.carried.digests if run.carried is not None and run.carried.digests else None)
        if run.due.remediation is not None:
            drift.remediating(s.status, objects.name_of(update))
        logcontext.bind(update=objects.name_of(update))

        def forget() -> None:
            s.status.current_update = None
        await self._create(s, update, forget)
        if step is not None and step.action == gate.Action.APPLY:
            await self._accepted(s, step, objects.name_of(update))

    async def _create(self, s: _Session, update: objects.Object, forget: Callable[[], None]) -> None:
        """Save the status that names `update` (so a crash never loses track of it), create it and hold it with
        our finalizer until it is absorbed. When the API server surely refused it (a 4xx that says so), `forget`
        it again and save that; when the answer leaves it unknown whether it was made (a timeout, a 5xx, a lost
        connection), the name stays: the next pass follows the Update if it exists and gives it up if it never
        appears (`_lost`) — forgetting it then would start a second Update beside one that runs. A finalizer that
        cannot be added leaves the Update as it is (it may run already): it is only a guard until it is absorbed."""
        await self._save(s)
        try:
            await self.client.create(update)
        except _REFUSED:
            forget()
            with contextlib.suppress(Exception):
                await self._save(s)
            raise
        try:
            await self.client.apply(
                {"apiVersion": up_api.API_VERSION, "kind": up_api.KIND,
                 "metadata": {"name": objects.name_of(update), "namespace": s.key.namespace,
                              "finalizers": [names.FINALIZER]}},
                field_manager=names.FIELD_MANAGER_STACK_FINALIZER)
        except errors.ApiError as err:
            log.warning("could not hold update %s with the finalizer until it is absorbed: %s",
                        objects.name_of(update), err)

    async def _apply_workspace(self, key: objects.ObjectKey, desired: objects.Object) -> ws_api.Workspace:
        """Apply the Stack's Workspace, unless this process applied the same one and nobody changed it since: then
        the Workspace as it is (read through the cache; pko.runtime.applied)."""
        digest = applied.digest(desired)
        now = self.clock().timestamp()
        last = self._applied.last(key)
        if last is not None and last.digest == digest:  # these manifests were applied: worth a (cached) read
            current = await self.client.get_or_none(resources.WORKSPACE, objects.name_of(desired), key.namespace)
            if self._applied.holds(key, digest, current, now):
                assert current is not None
                return ws_api.Workspace.model_validate(current)
        result = await self.client.apply(desired)
        self._applied.record(key, digest, result, now, desired)
        return ws_api.Workspace.model_validate(result)

    async def _expire(self, s: _Session, expiry: ttl.Expiry) -> None:
        """The TTL passed: mark the Stack (its deletion then destroys; docs/ttl.md), say so once, and delete it."""
        assert expiry.at is not None
        if not ttl.marked(s.stack):
            await self.client.apply(
                {"apiVersion": stack_api.API_VERSION, "kind": stack_api.KIND,
                 "metadata": {"name": s.key.name, "namespace": s.key.namespace,
                              "annotations": {names.ANNOTATION_EXPIRED: conditions.format_time(expiry.at)}}},
                field_manager=names.FIELD_MANAGER_STACK_TTL)
            message = ttl.expired_message(s.stack, expiry.at)
            log.info(message)
            await self.recorder.normal(s.stack, ttl.EVENT_EXPIRED, message)
        await self.client.delete(resources.STACK, s.key.name, s.key.namespace, missing_ok=True)

    # --- referenced outputs (pko, outputrefs.py) ------------------------------------------------------------------

    async def _wire_outputs(self, s: _Session) -> outputrefs.Carried | Result | None:
        """The values the Stack's `outputRefs` read, in the copy that carries them to the Workspace; else the Stack
        stalls on a cycle or waits for what is missing (status saved, the upstream's change brings it back)."""
        listed = (self.namespace_stacks(s.key.namespace) if self.namespace_stacks is not None
                  else (await self.client.list(resources.STACK, s.key.namespace)).items)
        edges = {objects.name_of(o): outputrefs.upstreams_of_object(o) for o in listed}
        edges[s.key.name] = outputrefs.upstreams(s.stack)
        found = outputrefs.cycle(s.key.name, edges)
        if found is not None:  # looked at again when a Stack of the cycle changes its references, and now and then
            return await self._stall(s, outputrefs.CYCLE_REASON, outputrefs.cycle_message(found), True,
                                     OUTPUT_REF_CYCLE_RETRY)
        offered = {name: await self._outputs_of(name, s.key.namespace)
                   for name in sorted(outputrefs.upstreams(s.stack))}
        copy = await self.client.get_or_none(resources.SECRET, outputrefs.secret_name(s.key.name), s.key.namespace)
        if copy is not None and not outputrefs.owned_by(copy, s.stack):
            return await self._stall(s, conditions.STALLED_SPEC_INVALID, outputrefs.not_ours_message(s.stack), True,
                                     None)
        kept = outputrefs.kept(copy, secrets.token_bytes(outputrefs.KEY_BYTES))
        resolution = outputrefs.resolve(s.stack, offered, kept)
        for name, offer in offered.items():
            if isinstance(offer, outputrefs.Gone) and any(
                    ref.stack_name == name and key in resolution.missing
                    for key, ref in outputrefs.refs_of(s.stack).items()):
                await self._request_outputs(name, s.key.namespace, offer.update)
        if resolution.missing:
            message = outputrefs.waiting_message(resolution.missing)
            shown = conditions.find(s.conditions, conditions.RECONCILING)
            if shown is None or shown.reason != outputrefs.WAITING_REASON or shown.message != message:
                s.conditions = conditions.mark_reconciling(s.conditions, outputrefs.WAITING_REASON, message,
                                                           now=self.clock())
                await self.recorder.normal(s.stack, "StackWaitingForOutput", message)
            await self._save(s)
            return None
        wanted = outputrefs.copy_secret(s.stack, resolution)
        if copy is None:
            await self.client.create(wanted)
        elif not outputrefs.holds(copy, wanted):  # new values: the Workspace's pod template changes with them
            wanted["metadata"]["resourceVersion"] = (copy.get("metadata") or {}).get("resourceVersion")
            await self.client.replace(wanted)
        return outputrefs.carried(s.stack, resolution)

    async def _outputs_of(self, name: str, namespace: str) -> outputrefs.Outputs | outputrefs.Gone | str:
        """The outputs of the upstream Stack `name`'s last update, when it was a successful `up` whose outputs are
        still there; else why not."""
        upstream = await self.client.get_typed_or_none(resources.STACK, stack_api.Stack, name, namespace)
        if upstream is None:
            return f'Stack "{name}" not found'
        last = upstream.status.last_update if upstream.status is not None else None
        if last is None or not last.name:
            return f'Stack "{name}" has no successful update to read outputs from yet'
        if last.state != stack_api.STATE_SUCCEEDED or last.type != up_api.UP:
            return f'the last update of Stack "{name}" ({last.name}) did not succeed'
        update = await self.client.get_typed_or_none(resources.UPDATE, up_api.Update, last.name, namespace)
        if update is None:
            return outputrefs.Gone(last.name)
        secret_name = update.status.outputs if update.status is not None else None
        if not secret_name:
            return outputrefs.Outputs({})  # an up with no outputs at all
        found = await self.client.get_or_none(resources.SECRET, secret_name, namespace)
        if found is None:
            return outputrefs.Gone(last.name)
        data, masked = _stack_outputs(found)
        return outputrefs.Outputs(data, frozenset(masked))

    async def _request_outputs(self, name: str, namespace: str, update: str) -> None:
        """Ask the upstream Stack `name` for a new `up` (its outputs are gone with its Update), once per Update, as
        a prerequisite asks for a resync."""
        request = f"outputs-of-{update}"
        upstream = await self.client.get_typed_or_none(resources.STACK, stack_api.Stack, name, namespace)
        if upstream is None or sync.reconcile_request(upstream) == request:
            return
        await self.client.apply(
            {"apiVersion": stack_api.API_VERSION, "kind": stack_api.KIND,
             "metadata": {"name": name, "namespace": namespace,
                          "annotations": {names.ANNOTATION_RECONCILE_REQUEST: request}}},
            field_manager=names.FIELD_MANAGER_PREREQUISITE_REQUEST)

    async def _carried_by(self, s: _Session) -> outputrefs.Carried | None:
        """The values the Stack's copy holds (what its last reconcile read), to build its Workspace again."""
        copy = await self.client.get_or_none(resources.SECRET, outputrefs.secret_name(s.key.name), s.key.namespace)
        if copy is None or not outputrefs.owned_by(copy, s.stack):
            return None
        kept = outputrefs.kept(copy, b"")
        if not kept.values:
            return None
        return outputrefs.carried(s.stack, outputrefs.Resolution(kept.key, dict(kept.values)))

    async def _lost(self, s: _Session, name: str) -> bool:
        """Whether the current Update `name`, which the API server does not have, is given up (True: it is
        forgotten and a new one may start); else `s.recheck_after` says when to look again (sync.lost_update_wait)."""
        wait = sync.lost_update_wait(s.key.name, name, self.clock())
        if wait > 0:
            s.recheck_after = wait
            return False
        log.warning("the current update %s was never created; starting anew", name)
        await self.recorder.warning(s.stack, "UpdateLost",
                                    f"Update {name} was never created (the operator was interrupted): starting anew")
        s.status.current_update = None
        s.gave_up = name
        return True

    async def _claim(self, s: _Session) -> float | None:
        """pko sharding: take over the Workspace and Updates of a Stack relabelled into this shard
        (:mod:`shardmove`); the seconds to wait while one of its Updates still runs in the shard it comes from."""
        workspace = await self.client.get_or_none(resources.WORKSPACE, s.key.name, s.key.namespace)
        if workspace is None or self.shard.owns(workspace):
            return None  # nothing to take over: new, or already here (a cached read, no request)
        found = await self.client.list(resources.UPDATE, s.key.namespace,
                                       labels={names.LABEL_STACK_NAME: s.key.name})
        spec = s.stack.spec
        templated = shardmove.templated_keys(spec.workspace_template, spec.update_template) if spec else set()
        move = shardmove.plan(self.shard, s.stack.metadata.labels, workspace, found.items, templated=templated)
        if move.waiting and self.lease_namespace is not None:  # is the shard it comes from still there?
            lease = await self.client.get_or_none(resources.LEASE, shardmove.origin_lease(workspace),
                                                  self.lease_namespace)
            gone = shardmove.origin_gone(lease, self.clock())
            if gone is not None:
                move = shardmove.plan(self.shard, s.stack.metadata.labels, workspace, found.items, gone, templated)
        if move.waiting:
            s.conditions = conditions.mark_reconciling(s.conditions, conditions.RECONCILING_PROCESSING,
                                                       shardmove.waiting_message(move, workspace), now=self.clock())
            await self._save(s)
            return shardmove.POLL
        labels = {"metadata": {"labels": dict(move.labels)}}
        for name in move.updates:
            with contextlib.suppress(errors.NotFound):
                await self.client.patch(resources.UPDATE, name, labels, s.key.namespace)
        if move.workspace:
            lease = {names.ANNOTATION_SHARD_LEASE: shardmove.own_lease(self.shard)}
            patch = {"metadata": {**labels["metadata"], "annotations": lease}}
            await self.client.patch(resources.WORKSPACE, s.key.name, patch, s.key.namespace)
            self._applied.forget(s.key)  # apply it again: the last apply this process made may be stale
        said = shardmove.moved_message(move, workspace)
        if move.interrupted:
            log.warning(said)
            await self.recorder.warning(s.stack, "ShardMoved", said)
        else:
            log.info(said)
            await self.recorder.normal(s.stack, "ShardMoved", said)
        return None

    # --- steps -------------------------------------------------------------------------------------------------

    async def _absorb(self, s: _Session) -> bool:
        """Fold a finished current Update into `lastUpdate`; False (status saved) while it is still running."""
        current = s.status.current_update
        assert current is not None
        update = await self.client.get_typed_or_none(resources.UPDATE, up_api.Update, current.name or "",
                                                     s.key.namespace)
        if update is None and await self._lost(s, current.name or ""):
            return True
        if update is not None and not steps.update_complete(update) and steps.update_finished(update):
            await self.recorder.warning(s.stack, "UpdateUnobserved", (
                f"Update {update.metadata.name} finished, but its spec changed after it started (generation "
                f"{update.metadata.generation or 0}, its status is of generation "
                f"{(update.status.observed_generation if update.status else None) or 0}); a finished Update never "
                "runs again, so its result is taken as it is"))
        elif update is None or not steps.update_complete(update):
            s.waiting = update
            s.conditions = conditions.mark_reconciling(s.conditions, conditions.RECONCILING_PROCESSING,
                                                       sync.processing_message(s.stack), now=self.clock())
            await self._save(s)
            return False
        now = self.clock()
        if gate.is_plan_preview(update, names.ANNOTATION_SAVE_PLAN) and s.status.approval is not None:
            await self._absorb_plan_preview(s, current, update)
            s.finalize_update = update.metadata.name
            s.status.current_update = None
            return True
        lost = gate.lost_plan(update)
        if lost is not None:  # nothing ran: no failure to retry, a plan to preview anew
            await self._plan_lost(s, lost, update.metadata.name or "")
            s.finalize_update = update.metadata.name
            s.status.current_update = None
            return True
        released = sync.stale_lock_lines(update.status.message if update.status else None)
        if released:  # pko: the agent released a lock whose holder was gone before this Update ran (PKO#736)
            await self.recorder.warning(s.stack, "StaleLockReleased", released)
        if conditions.is_true(update.status.conditions if update.status else None, conditions.FAILED):
            s.status.last_update = sync.record_failure(current, update, s.status.last_update, now)
            await self.recorder.warning(s.stack, "StackUpdateFailure", sync.update_event_message(update, True))
        else:
            outputs_name = update.status.outputs if update.status else None
            data: dict[str, bytes] | None = {}  # None: the Update names an outputs Secret that is gone
            masked: list[str] = []
            if outputs_name:
                secret = await self.client.get_or_none(resources.SECRET, outputs_name, s.key.namespace)
                data = None
                if secret is not None:
                    data, masked = _stack_outputs(secret)
                    s.status.outputs = sync.masked_outputs(data, masked)
            s.status.last_update = sync.record_success(current, update, now)
            s.conditions = drift.after_update(s.conditions, update, now)
            if update.status and update.status.project_info:
                s.status.project_info = update.status.project_info
            await self.recorder.normal(s.stack, "StackCreated", sync.update_event_message(update, False))
            if update.spec is not None and update.spec.type == up_api.UP and not s.deleting:
                # pko's spec.outputs (docs/outputs.md): the values stay in this pass, never in status or logs.
                s.conditions = await publish.publish(
                    self.client, self.recorder, s.stack, update.metadata.name or "",
                    None if data is None else {k: json.loads(v) for k, v in data.items()}, masked, s.conditions, now)
        if stack_api.spec_of(s.stack).outputs is None:
            s.conditions = outputs.clear(s.conditions)
        s.finalize_update = update.metadata.name
        s.status.current_update = None
        return True

    async def _show_workspace_problem(self, s: _Session, ws: ws_api.Workspace) -> None:
        """Carry a stuck Workspace's problem into the Stack's Reconciling message, with a Warning event each time
        the problem changes (not on every reconcile: the Workspace is re-checked every few seconds)."""
        ready = conditions.find(ws.status.conditions if ws.status else None, conditions.READY)
        if await self._show_queued(s, ready):
            return
        message = sync.waiting_for_workspace_message(ready)
        shown = conditions.find(s.conditions, conditions.RECONCILING)
        if shown is not None and shown.reason == conditions.RECONCILING_PROCESSING and shown.message == message:
            return
        s.conditions = conditions.mark_reconciling(s.conditions, conditions.RECONCILING_PROCESSING, message,
                                                   now=self.clock())
        await self._save(s)
        if message != conditions.MESSAGE_WAITING_FOR_WORKSPACE:
            await self.recorder.warning(s.stack, sync.WORKSPACE_NOT_READY_EVENT, message)

    async def _show_queued(self, s: _Session, ready: Condition | None) -> bool:
        """pko (--max-active-workspaces): the Workspace waits for a slot of the pool; the Stack shows
        ``Reconciling/Queued`` with the lane (not the place in the queue: it moves, and a write of every waiting
        Stack each time it does is what a large queue cannot afford), and says so once as an event, with the place
        it entered at. False: it does not wait."""
        if ready is None or ready.status != "False" or ready.reason != conditions.QUEUED:
            return False
        message = lanes.queued_summary(ready.message or "")
        shown = conditions.find(s.conditions, conditions.RECONCILING)
        if shown is not None and shown.reason == conditions.QUEUED and shown.message == message:
            return True
        s.conditions = conditions.mark_reconciling(s.conditions, conditions.QUEUED, message, now=self.clock())
        await self._save(s)
        if shown is None or shown.reason != conditions.QUEUED:
            await self.recorder.normal(s.stack, "StackQueued", ready.message or "")
        return True

    # --- approvals (pko, docs/approvals.md) ----------------------------------------------------------------------

    async def _approval_step(self, s: _Session, current: gate.Inputs, destroying: bool) -> gate.Step:
        """The gated Stack's next step; refusals are written to their approvals now (an acceptance only once its
        Update exists)."""
        self.watch_approvals()
        listed = await self.client.list(resources.STACK_APPROVAL, s.key.namespace)
        mine = [a for a in (approval_api.StackApproval.model_validate(item) for item in listed.items)
                if a.spec is not None and a.spec.stack_name == s.key.name]
        confirmed = (s.stack.metadata.annotations or {}).get(names.ANNOTATION_CONFIRM_DESTROY) if destroying else None
        step = gate.next_step(s.status.approval, current, mine, self.clock(), gate.ttl_seconds(s.stack),
                              without_approval_up_to=gate.threshold(s.stack) if destroying else None,
                              confirmed=confirmed)
        for verdict in step.verdicts:
            if not verdict.accepted:
                await self._write_verdict(s, verdict, None)
                await self.recorder.warning(s.stack, "StackApprovalRefused",
                                            f"StackApproval {verdict.name} refused ({verdict.reason}): "
                                            f"{verdict.message}")
        return step

    async def _accepted(self, s: _Session, step: gate.Step, update_name: str) -> None:
        for verdict in step.verdicts:
            if verdict.accepted:
                await self._write_verdict(s, verdict, update_name)
        review = s.status.approval
        assert review is not None
        if step.approval is None:  # destroy protection: below the threshold, or confirmed by annotation
            await self.recorder.normal(s.stack, "StackDestroyConfirmed",
                                       f"destroy {review.digest}: {step.why}; destroying in {update_name}")
            return
        await self.recorder.normal(s.stack, "StackApproved",
                                   f"plan {review.digest} approved by {review.approved_by} "
                                   f"(StackApproval {review.approval}): applying it in {update_name}")

    async def _write_verdict(self, s: _Session, verdict: gate.Verdict, update_name: str | None) -> None:
        now = self.clock()
        found = conditions.set_condition(None, approval_api.ACCEPTED, "True" if verdict.accepted else "False",
                                         verdict.reason, verdict.message, now=now)
        status: dict[str, object] = {
            "conditions": [c.to_wire() for c in found],
            "decidedAt": conditions.format_time(now)}
        if update_name:
            status["update"] = update_name
        with contextlib.suppress(errors.NotFound):
            await self.client.apply_status(
                objects.status_apply(approval_api.API_VERSION, approval_api.KIND,
                                     objects.ObjectKey(s.key.namespace, verdict.name), status),
                field_manager=names.FIELD_MANAGER_APPROVAL_STATUS)

    async def _plan_lost(self, s: _Session, digest: str, update_name: str) -> None:
        """The approved `up` found its plan gone from the workspace: forget the review (the next step previews
        anew), say so, and mark the approval that named the plan as not applied."""
        review = s.status.approval
        message = gate.lost_plan_message(digest, review)
        s.status.approval = None
        await self.recorder.warning(s.stack, "StackPlanLost", message)
        if review is not None and review.approval:
            await self._write_verdict(
                s, gate.Verdict(review.approval, False, approval_api.REASON_PLAN_NOT_FOUND, message), update_name)

    async def _absorb_plan_preview(self, s: _Session, current: stack_api.CurrentStackUpdate,
                                   update: up_api.Update) -> None:
        """A plan-saving preview finished: its digest awaits approval; a failure counts as a failed update (the
        failure policy retries it); an agent that saved no plan leaves the Stack stalled until its inputs change."""
        review = s.status.approval
        assert review is not None
        found = update.status.conditions if update.status else None
        failed = conditions.find(found, conditions.FAILED)
        if failed is not None and failed.status == "True":
            if failed.reason == gate.STALLED_PLANS_UNSUPPORTED:
                s.status.approval = review.model_copy(update={"state": gate.UNSUPPORTED})
                return
            s.status.last_update = sync.record_failure(current, update, s.status.last_update, self.clock())
            s.status.approval = None
            message = (update.status.message if update.status else None) or ""
            await self.recorder.warning(s.stack, "StackUpdateFailure", f"Failed to preview the update plan: {message}")
            return
        s.status.approval = gate.reviewed(review, update.metadata.annotations or {}, names.ANNOTATION_PLANNED_DIGEST,
                                          names.ANNOTATION_PLANNED_CHANGES, self.clock())
        if s.status.approval.state == gate.AWAITING:
            await self.recorder.normal(s.stack, "StackAwaitingApproval",
                                       gate.awaiting_message(s.status.approval, s.key.name))

    async def _refresh_stuck_workspace(self, s: _Session) -> None:
        """Re-apply the Workspace of an Update that has not started while its Workspace cannot get ready: the
        Workspace was written by an operator that has since gone (a killed leader, a restarted process) and may
        name a source only that operator served (its Program file server's address), so the Update would wait
        for it forever (found by tests/chaos/test_leader_handover.py). Only for the generation the Update was
        made for, so it still runs the spec it was created for."""
        update, current = s.waiting, s.status.current_update
        if update is None or current is None or update.spec is None:
            return
        ws = await self.client.get_typed_or_none(resources.WORKSPACE, ws_api.Workspace,
                                                 update.spec.workspace_name or "", s.key.namespace)
        await self._show_update_queued(s, ws)
        started = update.status is not None and update.status.start_time is not None
        if not sync.refresh_stuck_workspace(started=started, stack_generation=s.stack.metadata.generation,
                                            update_generation=current.generation, deleting=s.deleting,
                                            workspace_ready=ws is not None and steps.workspace_ready(ws)):
            return
        if not isinstance(stack_api.spec_of(s.stack).config, dict | None):
            return
        resolved = await self.resolver.resolve(s.stack)
        if isinstance(resolved, source_mod.Unavailable):
            return
        outputs = await self._carried_by(s) if stack_api.spec_of(s.stack).output_refs else None
        try:
            desired = ws_build.desired(s.stack, resolved.source, outputs, shard=self.shard)
        except ws_build.StallError:
            return
        await self.client.apply(desired)

    async def _show_update_queued(self, s: _Session, ws: ws_api.Workspace | None) -> None:
        """The current Update waits for its Workspace to get a slot of the pool (it slept to make room for
        another): the Stack shows ``Queued``, and ``StackProcessing`` again once the slot is granted."""
        ready = conditions.find(ws.status.conditions if ws is not None and ws.status else None, conditions.READY)
        if await self._show_queued(s, ready):
            return
        shown = conditions.find(s.conditions, conditions.RECONCILING)
        if shown is not None and shown.reason == conditions.QUEUED:
            s.conditions = conditions.mark_reconciling(s.conditions, conditions.RECONCILING_PROCESSING,
                                                       conditions.MESSAGE_STACK_PROCESSING, now=self.clock())
            await self._save(s)

    async def _synced(self, s: _Session, workspace_name: str, check: drift.Plan) -> Result | None:
        last = s.status.last_update
        assert last is not None
        now = self.clock()
        s.conditions = sync.mark_result(s.conditions, last, now, policy=self._policy(s.stack))
        if check.problem is not None and not drift.shows_problem(s.conditions):
            await self.recorder.warning(s.stack, "DriftScheduleInvalid", check.problem)
        s.conditions = drift.mark_schedule(s.conditions, check.problem, now)
        stack = s.stack.model_copy(update={"status": s.status})
        if s.deleting:
            if last.state != stack_api.STATE_SUCCEEDED:
                await self._save(s)
                waited = (now - (conditions.parse_time(last.last_resync_time) or now)).total_seconds()
                wait = sync.cooldown(stack_api.spec_of(s.stack), last, defaults=self.retry_policy)
                return Result(requeue_after=max(1.0, wait - waited))
            await self._save(s)
            await self._remove_finalizer(s)
            return None
        after = sync.requeue_after(stack, now, defaults=self.retry_policy, min_resync=self.min_resync)
        retry_at = sync.next_retry_at(stack, defaults=self.retry_policy)
        s.status.next_retry_time = conditions.format_time(retry_at) if retry_at is not None else None
        if check.wait is not None:  # the next drift check
            after = max(1.0, min(after, check.wait) if after else check.wait)
        await self._reclaim_workspace(s, workspace_name)
        await self._save(s)
        return Result(requeue_after=after) if after else None

    # --- drift checks (drift.py) --------------------------------------------------------------------------------

    async def _start_check(self, s: _Session, ws: ws_api.Workspace, now: datetime.datetime) -> None:
        """Start a drift check; the previous check's Update goes (only the latest one is kept to look at)."""
        update = drift.check_update(s.stack, ws, int(now.timestamp() * 1000), shard=self.shard)
        previous = s.status.drift.last_check if s.status.drift is not None else None
        drift.started(s.status, objects.name_of(update))
        logcontext.bind(update=objects.name_of(update))

        def forget() -> None:
            if s.status.drift is not None:
                s.status.drift.current_check = None
        await self._create(s, update, forget)
        if previous is not None and previous.name:
            await self.client.delete(resources.UPDATE, previous.name, s.key.namespace, missing_ok=True)

    async def _absorb_check(self, s: _Session) -> bool:
        """Fold a finished drift check into `status.drift` and `Drifted`; False (status saved) while it runs."""
        name = drift.in_flight(s.status) or ""
        update = await self.client.get_typed_or_none(resources.UPDATE, up_api.Update, name, s.key.namespace)
        if update is not None and not steps.update_finished(update):
            await self._save(s)
            return False
        await self._check_done(s, drift.absorb(s.status, update, name, self.clock()))
        if update is not None:
            s.finalize_update = name
        return True

    async def _check_done(self, s: _Session, finding: drift.Finding) -> None:
        said = drift.event(s.conditions, finding)
        if said is not None:
            await self.recorder.emit(s.stack, *said)
        s.conditions = drift.mark(s.conditions, finding, self.clock())

    async def _suspended(self, s: _Session, absorbed: bool) -> None:
        """Suspended: say so (once as an event), report an Update that just finished, start nothing. The Stack's
        next change (resuming is one) brings it back; nothing is requeued, not even branch polling."""
        if not sync.shows_suspended(s.conditions):
            await self.recorder.normal(s.stack, "StackSuspended",
                                       "Stack suspended: no new update starts until spec.suspend is false")
        s.conditions = sync.mark_suspended(s.conditions, s.status.last_update, absorbed, self.clock(),
                                           policy=self._policy(s.stack))
        if absorbed:
            # The workspace belongs to the Stack under its own name (stack/workspace.py).
            await self._reclaim_workspace(s, s.key.name)
        await self._save(s)

    async def _reclaim_workspace(self, s: _Session, workspace_name: str) -> None:
        """`workspaceReclaimPolicy: Delete`: drop the Workspace once the last update did not fail."""
        last = s.status.last_update
        if (last is None or last.state == stack_api.STATE_FAILED
                or stack_api.spec_of(s.stack).workspace_reclaim_policy != stack_api.RECLAIM_DELETE):
            return
        await self._finalize_update(s)
        try:
            await self.client.delete(resources.WORKSPACE, workspace_name, s.key.namespace)
            await self.recorder.normal(s.stack, "WorkspaceDeleted", "Workspace deleted per reclaim policy")
        except errors.NotFound:
            pass

    async def _prerequisites(self, s: _Session) -> str | None:
        failed: list[str] = []
        problem = ""
        for prerequisite in stack_api.spec_of(s.stack).prerequisites or ():
            other = await self.client.get_typed_or_none(resources.STACK, stack_api.Stack, prerequisite.name,
                                                        s.key.namespace)
            if other is None:
                failed.append(prerequisite.name)
                # The reference wraps the API server's NotFound error text.
                problem = (f'unable to fetch prerequisite "{prerequisite.name}": '
                           f'{stack_api.PLURAL}.{stack_api.GROUP} "{prerequisite.name}" not found')
                continue
            unsatisfied = sync.prerequisite_problem(prerequisite.requirement, other, self.clock())
            if unsatisfied is None:
                continue
            failed.append(prerequisite.name)
            problem = f'prerequisite not satisfied for "{prerequisite.name}": {unsatisfied.message}'
            if unsatisfied.request_resync_of is not None:
                request = f"after-{unsatisfied.request_resync_of}"
                if sync.reconcile_request(other) != request:
                    await self.client.apply(
                        {"apiVersion": stack_api.API_VERSION, "kind": stack_api.KIND,
                         "metadata": {"name": prerequisite.name, "namespace": s.key.namespace,
                                      "annotations": {names.ANNOTATION_RECONCILE_REQUEST: request}}},
                        field_manager=names.FIELD_MANAGER_PREREQUISITE_REQUEST)
        if len(failed) > 1:
            return f"multiple prerequisites were not satisfied {', '.join(failed)}"
        return problem or None

    async def _stall(self, s: _Session, reason: str, message: str, event: bool,
                     requeue_after: float | None) -> Result | None:
        if event:
            await self.recorder.warning(s.stack, "StackConfigInvalid", message)
        s.conditions = conditions.mark_stalled(s.conditions, reason, message, now=self.clock())
        await self._save(s)
        return Result(requeue_after=requeue_after) if requeue_after else None

    # --- writes ------------------------------------------------------------------------------------------------

    async def _save(self, s: _Session) -> None:
        s.conditions = gate.settle_condition(s.conditions, s.status.approval if gate.gated(s.stack) else None)
        s.status.conditions = s.conditions
        body = steps.status_body(s.status)
        unchanged = body == s.saved if s.saved is not None else steps.status_unchanged(s.stack, body)
        if unchanged:
            await self._finalize_update(s)
            return  # a reconcile that changes nothing (most of a waiting Stack's) writes nothing
        s.saved = None
        await self.client.apply_status(
            objects.status_apply(stack_api.API_VERSION, stack_api.KIND, s.key, body),
            field_manager=names.FIELD_MANAGER_STACK_STATUS,
        )
        s.saved = body
        await self._finalize_update(s)

    async def _finalize_update(self, s: _Session) -> None:
        """Release the absorbed Update: an empty apply drops the finalizer our field manager owns."""
        if s.finalize_update is None:
            return
        name, s.finalize_update = s.finalize_update, None
        try:
            await self.client.apply(
                {"apiVersion": up_api.API_VERSION, "kind": up_api.KIND,
                 "metadata": {"name": name, "namespace": s.key.namespace}},
                field_manager=names.FIELD_MANAGER_STACK_FINALIZER)
        except errors.NotFound:
            pass
        except errors.ApiError as err:  # best effort, as the reference: TTL or a person can clean up
            log.warning("could not release update %s: %s", name, err)

    async def _remove_finalizer(self, s: _Session) -> None:
        current = await self.client.get_typed_or_none(resources.STACK, stack_api.Stack, s.key.name, s.key.namespace)
        if current is None:
            return
        finalizers = list(current.metadata.finalizers or [])
        if names.FINALIZER in finalizers:
            await self._write_finalizers(current, [f for f in finalizers if f != names.FINALIZER])

    async def _write_finalizers(self, stack: stack_api.Stack, finalizers: list[str]) -> stack_api.Stack:
        """Set the Stack's finalizers and nothing else, on the version it was read at (a Conflict when someone
        changed it meanwhile: the reconcile is retried on the newer version)."""
        meta = stack.metadata
        patched = await self.client.patch(
            resources.STACK, meta.name or "",
            {"metadata": {"finalizers": finalizers, "resourceVersion": meta.resource_version}}, meta.namespace)
        return stack_api.Stack.model_validate(patched)


def _stack_outputs(secret: objects.Object) -> tuple[dict[str, bytes], list[str]]:
    """An Update's outputs Secret: each output's JSON, and the names of the secret ones."""
    data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    masked = json.loads(objects.annotations_of(secret).get(names.ANNOTATION_SECRETS, "[]"))
    return data, [str(m) for m in masked]


def _namespace_terminating(err: errors.ApiError) -> bool:
    causes = (err.details or {}).get("causes") or []
    return any(c.get("reason") == "NamespaceTerminating" for c in causes) or "being terminated" in err.message
