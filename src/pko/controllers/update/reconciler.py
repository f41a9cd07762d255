"""The Update reconciler: start each Update's Pulumi operation as a task, so no update in flight holds a worker.

The Go operator runs the whole operation inside `Reconcile`, so `MAX_CONCURRENT_RECONCILES` (25) caps how many
stacks a cluster can update at once, and one long `up` blocks a worker for its duration. Here `reconcile` only
decides (see :mod:`pko.controllers.update.plan`), marks the Update Progressing and starts an asyncio task; a
semaphore bounds how many operations run at once (default 200). When the task ends it writes the result and
re-queues the Update (for its TTL). An Update found Progressing with no task of ours (the operator restarted
mid-operation) is marked Failed/Aborted, as the reference does, and its Stack runs the same `up` again — unless
it is an `up` and its workspace runs pko's agent: then the agent is asked to resume it. pko's agent keeps an `up`
running when its caller goes away (pko.agent.kept: asked by the Update's UID), so the resume follows the same `up`
to its end; an agent that lost it (it restarted) returns the backend's record of that `up` when it finished after
all (pko.agent.resume), else the Update is Aborted all the same.
For the same reason a finished operation's result is written until the API server takes it (an outage is waited
out).

Must never: re-enter an Update whose operation is in flight, log secret outputs, or lose an operation's result
because its worker moved on.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio
from google.protobuf import json_format

from pko.api import conditions, names
from pko.api import update as up_api
from pko.api import workspace as ws_api
from pko.controllers import connect
from pko.controllers.update import drift, plan
from pko.kube import client as kclient
from pko.kube import errors, events, objects, owners, resources
from pko.protocol import client as agent_client
from pko.protocol import notices, transient
from pko.protocol.proto import agent_pb2
from pko.runtime import logcontext, metrics, sharding
from pko.runtime.controller import Result, expected

log = logging.getLogger(__name__)
events_log = logging.getLogger("pko.pulumi")

CONNECT_TIMEOUT = 10.0
RETRY_AFTER = 5.0
RECORD_BACKOFF = (0.5, 1.0, 2.0, 5.0)  # between attempts to write an operation's result (the last one repeats)
STOP_TIMEOUT = 60.0  # for an agent to interrupt a kept `up` on purpose and see its CLI stop
RESUME_WINDOW = 300.0  # after this long since our start, an interrupted `up` whose workspace is not back is aborted
DEFAULT_MAX_OPERATIONS = 200
#: The least time the calls before an operation's stream (SelectStack) get, whatever its idle timeout or deadline.
PRE_STREAM_FLOOR = 30.0


def _at_least(limit: float | None, floor: float) -> float | None:
    """`limit`, never under `floor` (None: no limit): a deadline that has passed is the stream's to tell."""
    return None if limit is None else max(limit, floor)


def _timestamp(value: Any) -> str | None:
    if value is None or (value.seconds == 0 and value.nanos == 0):
        return None
    moment = value.ToDatetime(tzinfo=datetime.UTC)
    return str(conditions.format_time(moment))


class UpdateReconciler:
    def __init__(
        self,
        client: kclient.Client,
        connector: connect.Connector,
        recorder: events.Recorder,
        workspace_recorder: events.Recorder,
        *,
        max_operations: int = DEFAULT_MAX_OPERATIONS,
        enqueue: Callable[[objects.ObjectKey], None] | None = None,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
        pulumi_metrics: metrics.PulumiMetrics | None = None,
        idle_timeout: float = 0.0,
        timeout: float = 0.0,
    ) -> None:
        self.client = client
        self.metrics = pulumi_metrics
        self.idle_timeout = idle_timeout  # --update-idle-timeout (seconds; 0: none); spec.idleTimeout overrides it
        self.timeout = timeout  # pko: --update-timeout (seconds; 0: none); spec.timeout overrides it
        self.connector = connector
        self.recorder = recorder
        self.workspace_recorder = workspace_recorder
        self.max_operations = max_operations
        self.enqueue = enqueue
        self.clock = clock
        self.active: dict[objects.ObjectKey, asyncio.Task[None]] = {}
        self.started = time.monotonic()
        self.shard = sharding.EVERYTHING  # pko: the Updates this operator runs (--shard-key)

    @property
    def running(self) -> int:
        return len(self.active)

    async def close(self) -> None:
        """Cancel in-flight operations and wait for them: each asks its agent to stop pulumi gracefully, except a
        kept `up`, which runs on for the next operator to follow."""
        tasks = list(self.active.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def lead(self) -> None:
        """This process starts leading: the window in which an interrupted `up` waits for its workspace to come
        back counts from now, not from the process's start (a standby that led after hours would abort them)."""
        self.started = time.monotonic()

    async def step_down(self) -> None:
        """This process stopped leading: its operations stop as at a shutdown (:meth:`close`), for the new leader
        picks them up as after a restart — two leaders must never run the same Update."""
        if self.active:
            log.warning("leadership lost: stopping %d operations for the new leader to pick up", len(self.active))
        await self.close()

    async def __call__(self, key: objects.ObjectKey) -> Result | None:
        update = await self.client.get_typed_or_none(resources.UPDATE, up_api.Update, key.name, key.namespace)
        if update is None or not self.shard.owns_labels(update.metadata.labels):
            return None  # gone, or another shard's
        now = self.clock()
        controlled = any(ref.controller for ref in update.metadata.owner_references or ())
        decision = plan.decide(update, running=key in self.active, deleting=bool(update.metadata.deletion_timestamp),
                               has_controller=controlled, now=now)
        if decision.action == plan.Action.RESUME and time.monotonic() - self.started > RESUME_WINDOW:
            decision = plan.Decision(plan.Action.ABORT)  # too late to wait for its workspace: the reference's answer
        match decision.action:
            case plan.Action.IGNORE:
                return None
            case plan.Action.WAIT_TTL:
                return Result(requeue_after=decision.requeue_after)
            case plan.Action.EXPIRE:
                await self.client.delete(resources.UPDATE, key.name, key.namespace, missing_ok=True)
                await self.recorder.normal(update, "UpdateExpired", "Update has expired")
                return None
            case plan.Action.ABORT:
                await self._save(update, plan.failed(plan.REASON_ABORTED))
                return None
            case plan.Action.CANCEL:
                await self._save(update, plan.failed(plan.REASON_CANCELED))
                return None
        if self.running >= self.max_operations:
            return Result(requeue_after=RETRY_AFTER)
        resume_after = decision.resume_after  # set for RESUME only

        spec = update.spec or up_api.UpdateSpec()
        workspace = await self.client.get_typed_or_none(resources.WORKSPACE, ws_api.Workspace,
                                                        spec.workspace_name or "", key.namespace)
        if workspace is None:
            if resume_after is not None:  # nothing left to ask: the reference's answer
                await self._save(update, plan.failed(plan.REASON_ABORTED))
                return None
            await self._save(update, plan.waiting(plan.REASON_WORKSPACE_NOT_FOUND, "the workspace does not exist"))
            return Result(requeue_after=RETRY_AFTER)
        ready = conditions.find((workspace.status.conditions if workspace.status else None), conditions.READY)
        if ready is None or ready.status != "True" or not (workspace.status and workspace.status.address):
            if resume_after is not None:  # still Progressing: wait for the agent (a restarted operator restarts it)
                return Result(requeue_after=RETRY_AFTER)
            await self._save(update, plan.waiting(plan.REASON_WORKSPACE_NOT_READY, "the workspace is not ready"))
            return None  # the workspace's transition to Ready re-queues this Update
        try:
            conn = await self.connector.connect(key.namespace, workspace.metadata.name or "",
                                                workspace.status.address, CONNECT_TIMEOUT)
        except connect.ConnectionFailed as err:
            await self.workspace_recorder.warning(workspace, "ConnectionFailure", str(err))
            if resume_after is None:
                await self._save(update, plan.waiting(plan.REASON_TRANSIENT, str(err)))
            return Result(requeue_after=RETRY_AFTER)

        update = await self._save(update, plan.started())
        logcontext.bind(update=key.name)  # the operation's task inherits it
        if resume_after is not None:
            log.info("the operator restarted while this up ran: asking the agent to resume it")
        self.active[key] = asyncio.create_task(self._operate(key, update, conn, resume_after),
                                               name=f"update-{key}")
        return None

    # --- the operation -----------------------------------------------------------------------------------------

    async def _operate(self, key: objects.ObjectKey, update: up_api.Update, conn: connect.Connection,
                       resume_after: datetime.datetime | None = None) -> None:
        completed = False  # its status says Complete: the watch brings the look its end needs (its TTL's wait)
        try:
            started = time.monotonic()
            async with conn:
                outcome = await self._run(update, conn, resume_after)
            operated = time.monotonic() - started
            if not await self.record(update, outcome):
                return
            completed = outcome.complete[0] == "True"
            self._measure(update, outcome, operated)
            kind = update.spec.type if update.spec else None
            if outcome.failed[0] == "True":
                await self.recorder.warning(update, "UpdateFailed", plan.event_message(outcome, kind or ""))
            else:
                await self.recorder.normal(update, "UpdateSucceeded", plan.event_message(outcome, kind or ""))
        except asyncio.CancelledError:
            log.warning("interrupted by shutdown")
            raise
        except Exception:
            log.exception("could not record the operation's outcome")
        finally:
            self.active.pop(key, None)
            # looked at again unless the Complete status just written brings that look (a complete Update's next
            # step never depends on whether this task still runs: plan.decide): it was a second one, each Update
            if self.enqueue is not None and not completed:
                self.enqueue(key)

    async def _run(self, update: up_api.Update, conn: connect.Connection,
                   resume_after: datetime.datetime | None = None) -> plan.Outcome:
        """The operation's outcome, with the resource changes of the engine's summary event when one came (a
        failed operation ends with an error status, after its events)."""
        changes: list[dict[str, int]] = []
        released: list[str] = []
        outcome = await self._stream(update, conn, changes, released, resume_after)
        if changes and outcome.resource_changes is None:
            outcome.resource_changes = changes[-1]
        if released:  # pko: a status line for each stale lock the agent released (PKO#736), before the result's
            outcome.message = "\n".join([*released, *([outcome.message] if outcome.message else [])])
        return outcome

    async def _stream(self, update: up_api.Update, conn: connect.Connection, changes: list[dict[str, int]],
                      released: list[str], resume_after: datetime.datetime | None = None) -> plan.Outcome:
        spec = update.spec or up_api.UpdateSpec()
        kind = spec.type or ""
        gate = plan.plan_gate(update.metadata.annotations or {}, kind)
        drifted = drift.Collector() if drift.is_drift_check(update) else None
        kept = ""  # the `up`'s name when the agent keeps it running past this call (pko.agent.kept)
        silence = plan.idle_timeout(spec, self.idle_timeout)
        limit = plan.timeout(spec, self.timeout)
        began = resume_after or self.clock()  # a resumed operation keeps its first start's deadline
        try:
            # the calls before the operation's stream have the same limits: an agent that hangs in SelectStack (a
            # backend that never answers, a peer gone without a reset) would hold the Update Progressing for ever
            select = conn.stub.SelectStack(
                agent_pb2.SelectStackRequest(stack_name=spec.stack_name or "", create=True), metadata=conn.metadata,
                timeout=_at_least(plan.wait_limit(silence, plan.remaining(limit, began, self.clock()))[0],
                                  PRE_STREAM_FLOOR))
            await select
            if gate.plan_digest and not plan.supports_plans(await select.initial_metadata()):
                # never an unreviewed `up`: an agent that does not know plan_digest would ignore it
                return plan.failed(plan.REASON_PLANS_UNSUPPORTED, plan.PLANS_UNSUPPORTED_MESSAGE)
            if gate.destroy_preview and not plan.supports(await select.initial_metadata(),
                                                          plan.CAPABILITY_DESTROY_PREVIEW):
                # never a real destroy: an agent that does not know preview_only would delete everything
                return plan.failed(plan.REASON_PLANS_UNSUPPORTED, plan.DESTROY_PREVIEW_UNSUPPORTED_MESSAGE)
            if resume_after is not None and not plan.supports(await select.initial_metadata(),
                                                              plan.CAPABILITY_RESUME):
                return plan.failed(plan.REASON_ABORTED)  # a Go agent: the reference's answer
            # pko: an `up` the agent keeps running if this operator goes away (restart, upgrade, OOM kill); the
            # next one follows it by the Update's UID (pko.agent.kept)
            kept = (update.metadata.uid or "") if kind == up_api.UP and plan.supports(
                await select.initial_metadata(), plan.CAPABILITY_KEEP_RUNNING) else ""
            stream = self._call(kind, spec, conn, gate, resume_after, kept)
            responses = aiter(stream)
            while True:
                wait, deadline = plan.wait_limit(silence, plan.remaining(limit, began, self.clock()))
                try:
                    if wait is None:
                        response = await anext(responses)
                    else:
                        async with asyncio.timeout(wait):  # no task a message, as `wait_for` makes on 3.11
                            response = await anext(responses)
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    # silent for too long (a hung provider, an agent behind a dead connection), or past its
                    # deadline: cancelling the call makes the agent cancel the CLI, which releases the stack's lock
                    # as it stops; a kept `up` is stopped by name first (its call going away would not stop it)
                    if kept:
                        await self._stop_kept(conn, kept)
                    stream.cancel()
                    if deadline:
                        log.warning("ran for longer than %.0fs: cancelled the %s", limit, kind)
                        return plan.failed(plan.REASON_DEADLINE_EXCEEDED, plan.deadline_message(kind, limit))
                    log.warning("no output for %.0fs: cancelled the %s", silence, kind)
                    return plan.failed(plan.REASON_IDLE_TIMEOUT, plan.idle_message(kind, silence))
                which = response.WhichOneof("response")
                if which == "event":
                    event = json_format.MessageToDict(response.event)
                    self._log_event(update, event)
                    notice = notices.stale_lock_notice(event)
                    if notice is not None:  # the agent released a lock whose holder is gone (pko.protocol.notices)
                        released.append(notice)
                        await self.recorder.warning(update, "StaleLockReleased", notice)
                    found = plan.resource_changes(event)
                    if found is not None:
                        changes.append(found)
                    if drifted is not None:
                        drifted.observe(event)
                elif which == "result":
                    if gate.save_plan or gate.destroy_preview:
                        problem = await self._record_plan(update, response.result)
                        if problem is not None:
                            return problem
                    outcome = await self._absorb(update, kind, response.result)
                    if plan.expects_empty(update) and not gate.destroy_preview and outcome.failed[0] != "True":
                        outcome = plan.left_behind(outcome, await self._resource_count(
                            conn, _at_least(silence or None, PRE_STREAM_FLOOR)))
                    # a failed drift check keeps what its preview had found before the failure (e.g. a field
                    # conflict in the Kubernetes provider's dry-run apply is the drift it reports)
                    if drifted is not None and (outcome.failed[0] != "True" or drifted.changes):
                        outcome.drift = drifted.result()
                    return outcome
        except grpc.aio.AioRpcError as err:
            if resume_after is not None and (not kept or err.code() == grpc.StatusCode.FAILED_PRECONDITION):
                # nothing to resume: the reference's answer (the Stack retries); a kept `up` that was followed and
                # failed is a failed `up`, told as any other
                log.info("the agent could not resume the interrupted up: %s", err.details())
                return plan.failed(plan.REASON_ABORTED)
            info = agent_client.pulumi_error_info(err)
            message = info.message if info else err.details()
            if info is None and err.code() in transient.TRANSIENT_CODES:  # the agent, not the operation, failed:
                message = transient.lost_agent_message(err.code(), message or "")  # a retry never counts to Stalled
            outcome = plan.from_error(message, info.reason if info else None)
            if drifted is not None and drifted.changes:  # what the failed drift check had found (see above)
                outcome.drift = drifted.result()
            return outcome
        except ValueError as err:
            return plan.failed("InvalidSpec", str(err))
        return plan.from_error(f"didn't receive a{'n' if kind == 'up' else ''} {kind} result", None)

    async def _stop_kept(self, conn: connect.Connection, operation_id: str) -> None:
        """Ask the agent to interrupt the kept `up` and wait until its CLI has stopped, releasing the stack's lock;
        when the agent cannot be asked (a dead connection) its `up` ends on its own and the workspace refuses other
        operations until then."""
        try:
            await conn.control.Cancel(agent_pb2.CancelRequest(operation_id=operation_id), metadata=conn.metadata,
                                      timeout=STOP_TIMEOUT)
        except grpc.aio.AioRpcError as err:
            log.warning("could not stop the kept up %s: %s", operation_id, err.details())

    async def _resource_count(self, conn: connect.Connection, timeout: float | None = None) -> int | None:
        """How many resources the selected stack holds (the agent's Info); None when the backend does not say."""
        info = await conn.stub.Info(agent_pb2.InfoRequest(), metadata=conn.metadata, timeout=timeout)
        return info.summary.resource_count if info.summary.HasField("resource_count") else None

    async def record(self, update: up_api.Update, outcome: plan.Outcome) -> bool:
        """Write the outputs Secret and the status `outcome` gives, retrying through API server outages (the
        result exists nowhere else); False when the Update is gone meanwhile or the API server refuses what is
        written (a retry would not change that; the Update is then Aborted after a restart, as before)."""
        attempt = 0
        while True:
            try:
                if outcome.secret is not None:
                    # AlreadyExists: written by an earlier attempt at this very Update; immutable and identical.
                    with contextlib.suppress(errors.AlreadyExists):
                        await self.client.create(outcome.secret)
                await self._save(update, outcome)
                return True
            except errors.NotFound:
                log.info("the Update is gone: its result is not recorded")
                return False
            except (errors.BadRequest, errors.Invalid) as err:  # refused as written: no retry would change that
                log.error("could not record the operation's result: %s", err)
                return False
            except Exception as err:  # an outage, a 5xx, a 429: wait and write again
                delay = RECORD_BACKOFF[min(attempt, len(RECORD_BACKOFF) - 1)]
                attempt += 1
                log.warning("could not record the operation's result (attempt %d, again in %.1fs): %s",
                            attempt, delay, err, exc_info=None if expected(err) else err)
                await asyncio.sleep(delay)

    async def _record_plan(self, update: up_api.Update, result: Any) -> plan.Outcome | None:
        """Put the saved plan's digest and change summary on the Update (the Stack shows them for review); a
        failed outcome when the agent saved none (it does not know `save_plan`)."""
        if not result.HasField("plan_digest"):
            return plan.failed(plan.REASON_PLANS_UNSUPPORTED, plan.PLANS_UNSUPPORTED_MESSAGE)
        resources = list(result.resources) if isinstance(result, agent_pb2.DestroyResult) else None
        await self.client.apply(
            {"apiVersion": up_api.API_VERSION, "kind": up_api.KIND,
             "metadata": {"name": update.metadata.name, "namespace": update.metadata.namespace,
                          "annotations": plan.planned_annotations(result.plan_digest, dict(result.change_summary),
                                                                  resources)}},
            field_manager=names.FIELD_MANAGER_UPDATE_PLAN)
        return None

    def _measure(self, update: up_api.Update, outcome: plan.Outcome, operated: float) -> None:
        """The operation's metrics: its duration since the Update was created, the operation phase, the resource
        changes and, when it succeeded, the time of the last success."""
        if self.metrics is None:
            return
        now = self.clock()
        created = conditions.parse_time(update.metadata.creation_timestamp) or now
        kind = (update.spec.type if update.spec else None) or ""
        # `type` is free text in the CRD: an unknown one is labelled "unknown", so it cannot grow the label set
        kind = kind if kind in (up_api.UP, up_api.PREVIEW, up_api.REFRESH, up_api.DESTROY) else "unknown"
        self.metrics.update_finished(
            update.metadata.namespace or "", plan.stack_label(update), kind,
            outcome.failed[0] != "True", seconds=(now - created).total_seconds(), operation_seconds=operated,
            changes=outcome.resource_changes, ended_at=now.timestamp(),
        )

    def _call(self, kind: str, spec: up_api.UpdateSpec, conn: connect.Connection,
              gate: plan.PlanGate | None = None,
              resume_after: datetime.datetime | None = None, kept: str = "") -> agent_client.StreamCall:
        common: dict[str, Any] = {}
        if spec.parallel is not None:
            common["parallel"] = spec.parallel
        if spec.message is not None:
            common["message"] = spec.message
        target = list(spec.target or [])
        stream: agent_client.StreamCall
        if kind == up_api.UP:
            request = agent_pb2.UpRequest(target=target, replace=list(spec.replace or []), **common)
            _set(request, expect_no_changes=spec.expect_no_changes, target_dependents=spec.target_dependents,
                 refresh=spec.refresh, continue_on_error=spec.continue_on_error,
                 plan_digest=gate.plan_digest if gate else None)
            if resume_after is not None:
                request.resume_after.FromDatetime(resume_after)
            if kept:
                request.operation_id = kept
            stream = conn.stub.Up(request, wait_for_ready=True, metadata=conn.metadata)
        elif kind == up_api.PREVIEW:
            request_p = agent_pb2.PreviewRequest(target=target, replace=list(spec.replace or []), **common)
            _set(request_p, expect_no_changes=spec.expect_no_changes, target_dependents=spec.target_dependents,
                 refresh=spec.refresh, save_plan=True if gate and gate.save_plan else None)
            stream = conn.stub.Preview(request_p, wait_for_ready=True, metadata=conn.metadata)
        elif kind == up_api.REFRESH:
            request_r = agent_pb2.RefreshRequest(target=target, **common)
            _set(request_r, expect_no_changes=spec.expect_no_changes, run_program=spec.run_program)
            stream = conn.stub.Refresh(request_r, wait_for_ready=True, metadata=conn.metadata)
        elif kind == up_api.DESTROY:
            request_d = agent_pb2.DestroyRequest(target=target, **common)
            _set(request_d, target_dependents=spec.target_dependents, refresh=spec.refresh,
                 continue_on_error=spec.continue_on_error, remove=spec.remove, run_program=spec.run_program,
                 preview_only=True if gate and gate.destroy_preview else None)
            stream = conn.stub.Destroy(request_d, wait_for_ready=True, metadata=conn.metadata)
        else:
            raise ValueError(f'unsupported update type "{kind}"')
        return stream

    async def _absorb(self, update: up_api.Update, kind: str, result: Any) -> plan.Outcome:
        secret_name = None
        secret: dict[str, Any] | None = None
        if kind == up_api.UP and len(result.outputs):
            outputs = {key: (value.value, value.secret) for key, value in result.outputs.items()}
            # owned (garbage-collected with the Update) but not controlled, as the Go operator writes it
            secret = owners.set_owner_reference(plan.outputs_secret(update, outputs), update)
            secret_name = secret["metadata"]["name"]
        summary = result.summary
        project = ({"name": result.project_info.name, "runtime": result.project_info.runtime}
                   if result.HasField("project_info") else None)
        start = _timestamp(summary.start_time) if summary.HasField("start_time") else None
        end = _timestamp(summary.end_time) if summary.HasField("end_time") else None
        if not summary.result:  # a preview has no summary: it succeeded if it got here
            now = conditions.format_time(self.clock())
            return plan.from_result("succeeded", "", start or now, end or now,
                                    result.permalink if result.HasField("permalink") else None, project, None)
        outcome = plan.from_result(summary.result, summary.message, start, end,
                                   result.permalink if result.HasField("permalink") else None, project, secret_name)
        outcome.secret = secret  # written with the status by record
        return outcome

    def _log_event(self, update: up_api.Update, event: dict[str, Any]) -> None:
        events_log.info("engine event", extra=plan.engine_log_fields(update, event))

    # --- status ------------------------------------------------------------------------------------------------

    async def _save(self, update: up_api.Update, outcome: plan.Outcome) -> up_api.Update:
        """Apply the status `outcome` gives; the Update as the API server has it now."""
        body = plan.status_body(update, outcome, self.clock())
        saved = await self.client.apply_status(
            objects.status_apply(up_api.API_VERSION, up_api.KIND, objects.ObjectKey.of(update.metadata), body),
            field_manager=names.FIELD_MANAGER_UPDATE_STATUS,
        )
        return up_api.Update.model_validate(saved)


def _set(message: Any, **fields: Any) -> None:
    for name, value in fields.items():
        if value is not None:
            setattr(message, name, value)
