"""The ``agent.AutomationService`` implementation: each RPC as the reference agent performs it.

Operations act on the selected stack (``FAILED_PRECONDITION "no stack is selected"`` otherwise). The four streamed
operations run the CLI with an event log, stream every engine event as a ``Struct`` while the CLI runs, and finish
with one result (summary, permalink, outputs, project info) — or with ``UNKNOWN "<op> failed: ..."`` plus a
``PulumiErrorInfo`` detail for known failures. A client cancelling the call interrupts the CLI (Ctrl-C) and waits for
it to wind down, so the stack is never left locked — except an `up` the operator asked to keep running
(`operation_id`, pko.agent.kept): it goes on without its caller until it ends, a resume follows it, or
`OperationControl.Cancel` stops it; no other operation starts in the workspace meanwhile.

It must never log config values, outputs or event contents, and never block the event loop.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import socket
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format, struct_pb2

from pko.agent import cliargs, errors, eventlog, kept, plans, pulumicmd, results, resume, stalelocks
from pko.agent.config import plan_config
from pko.agent.errors import AgentError
from pko.agent.pulumicmd import CommandError, CommandResult
from pko.agent.workspace import StackNotFoundError, Workspace
from pko.protocol import notices as notices_
from pko.protocol.proto import agent_pb2, agent_pb2_grpc

log = logging.getLogger("pko.agent.server")

Reply = TypeVar("Reply")
StreamMessage = TypeVar("StreamMessage")


def _read_text(path: str) -> str:
    with open(path) as handle:
        return handle.read()


async def _abort(context: grpc.aio.ServicerContext[Any, Any], err: AgentError) -> None:
    await context.abort(err.rpc.code, err.rpc.message, err.rpc.trailing_metadata())


def _seconds(text: str | None, default: float) -> float:
    """A positive number of seconds from the environment, else `default`."""
    try:
        value = float(text) if text else default
    except ValueError:
        return default
    return value if value > 0 else default


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class _Seen:
    """What an operation's engine events told: when it began (as the agent saw it), the root Stack's outputs, the
    engine's result."""

    def __init__(self) -> None:
        self.started = datetime.datetime.now(datetime.UTC)
        self.outputs: dict[str, Any] | None = None
        self.result: str | None = None

    def watch(self, event: dict[str, Any]) -> None:
        outputs = results.root_stack_outputs(event)
        if outputs is not None:
            self.outputs = outputs  # the last report wins: a program registers its outputs at its end
        result = results.summary_result(event)
        if result is not None:
            self.result = result


class AutomationService(agent_pb2_grpc.AutomationServiceServicer, agent_pb2_grpc.OperationControlServicer):
    """Serves one workspace (and pko's OperationControl for its kept `up`)."""

    def __init__(self, workspace: Workspace, pulumi_log_level: int = 0):
        self.ws = workspace
        self.pulumi_log_level = pulumi_log_level
        #: a stale lock is this agent's predecessor's only if taken before now (pko.agent.stalelocks)
        self.started = datetime.datetime.now(datetime.UTC)
        self.stopping = False
        self._stack_lock = asyncio.Lock()
        self.plans = plans.PlanStore(workspace.workdir)
        self._kept: kept.Kept[agent_pb2.UpStream] | None = None  # the latest `up` kept running past its caller
        self.abandon_after = _seconds(os.environ.get("PKO_KEPT_UNFOLLOWED_SECONDS"), kept.ABANDON_AFTER)

    # --- plumbing ---------------------------------------------------------------------------------------------

    async def _unary(self, context: grpc.aio.ServicerContext[Any, Any], call: Awaitable[Reply]) -> Reply:
        try:
            return await call
        except AgentError as err:
            await _abort(context, err)
        except CommandError as err:
            await _abort(context, AgentError(grpc.StatusCode.UNKNOWN, str(err)))
        except Exception as err:  # like a Go handler returning a plain error: UNKNOWN with its text
            log.exception("unexpected error")
            await _abort(context, AgentError(grpc.StatusCode.UNKNOWN, str(err)))
        raise AssertionError("unreachable: abort raises")

    async def ensure_stack(self) -> str:
        """The name of the selected stack."""
        async with self._stack_lock:
            name = await self.ws.selected_stack()
        if name is None:
            raise AgentError(grpc.StatusCode.FAILED_PRECONDITION, "no stack is selected")
        return name

    def cancel(self) -> None:
        """Interrupt every running CLI command (first shutdown signal). Non-blocking."""
        if self.stopping:
            return
        self.stopping = True
        self.ws.cli.interrupt_all()

    # --- unary RPCs -------------------------------------------------------------------------------------------

    async def WhoAmI(self, request: agent_pb2.WhoAmIRequest,
                     context: grpc.aio.ServicerContext[Any, Any]) -> agent_pb2.WhoAmIResult:
        async def call() -> agent_pb2.WhoAmIResult:
            try:
                data = await self.ws.whoami()
            except CommandError as err:
                log.error("whoami completed with an error")
                raise errors.operation_failed("whoami", str(err)) from None
            return agent_pb2.WhoAmIResult(user=str(data.get("user", "")), url=str(data.get("url", "")),
                                          organizations=[str(o) for o in data.get("organizations") or []])
        return await self._unary(context, call())

    async def SelectStack(self, request: agent_pb2.SelectStackRequest,
                          context: grpc.aio.ServicerContext[Any, Any]) -> agent_pb2.SelectStackResult:
        async def call() -> agent_pb2.SelectStackResult:
            # pko: announce what this agent adds to the protocol (a Go agent sends nothing), so the operator never
            # sends a plan-gated `up` to an agent that would ignore the plan.
            await context.send_initial_metadata(((plans.CAPABILITIES_HEADER, plans.CAPABILITY),))
            if not request.stack_name:
                raise AgentError(grpc.StatusCode.INVALID_ARGUMENT, "invalid stack name")
            async with self._stack_lock:
                # Each Update selects its stack first: when this agent selected it already, no command runs (the
                # workspace is the agent's alone; a command that finds the stack gone from the backend makes it
                # forget the selection, and the next selection creates it again). Nothing here lists the
                # backend's stacks (pko: the reference's `Stack.Info` does, so every workspace start costs
                # O(stacks in the backend)); the summary carries the name, the one field the operators read.
                if self.ws.selected != request.stack_name:
                    if request.create:
                        if await self.ws.select_or_create_stack(request.stack_name, request.secrets_provider):
                            log.info("created a stack: %s", request.stack_name)
                    else:
                        try:
                            await self.ws.select_stack(request.stack_name)
                        except StackNotFoundError:
                            raise AgentError(grpc.StatusCode.NOT_FOUND, "stack not found") from None
                log.info("selected a stack: %s", request.stack_name)
            return agent_pb2.SelectStackResult(summary=agent_pb2.StackSummary(name=request.stack_name))
        return await self._unary(context, call())

    async def Info(self, request: agent_pb2.InfoRequest,
                   context: grpc.aio.ServicerContext[Any, Any]) -> agent_pb2.InfoResult:
        async def call() -> agent_pb2.InfoResult:
            stack = await self.ensure_stack()
            return agent_pb2.InfoResult(summary=await self.ws.stack_info(stack))
        return await self._unary(context, call())

    async def SetAllConfig(self, request: agent_pb2.SetAllConfigRequest,
                           context: grpc.aio.ServicerContext[Any, Any]) -> agent_pb2.SetAllConfigResult:
        async def call() -> agent_pb2.SetAllConfigResult:
            stack = await self.ensure_stack()
            project = str(self.ws.project().get("name", ""))
            plan = plan_config(project, list(request.config), os.environ.get, _read_text)
            log.debug("setting all config: %s", plan.keys())
            await self.ws.set_all_config(stack, plan)
            return agent_pb2.SetAllConfigResult()
        return await self._unary(context, call())

    async def AddEnvironments(self, request: agent_pb2.AddEnvironmentsRequest,
                              context: grpc.aio.ServicerContext[Any, Any]) -> agent_pb2.AddEnvironmentsResult:
        async def call() -> agent_pb2.AddEnvironmentsResult:
            stack = await self.ensure_stack()
            await self.ws.add_environments(stack, list(request.environment))
            return agent_pb2.AddEnvironmentsResult()
        return await self._unary(context, call())

    async def Install(self, request: agent_pb2.InstallRequest,
                      context: grpc.aio.ServicerContext[Any, Any]) -> agent_pb2.InstallResult:
        async def call() -> agent_pb2.InstallResult:
            log.info("installing the project dependencies")
            try:
                installed = await self.ws.install()
            except CommandError as err:
                log.error("install completed with an error")
                raise AgentError(grpc.StatusCode.ABORTED, str(err)) from None
            if installed:
                log.info("installation completed")
            return agent_pb2.InstallResult()
        return await self._unary(context, call())

    async def PulumiVersion(self, request: agent_pb2.PulumiVersionRequest,
                            context: grpc.aio.ServicerContext[Any, Any]) -> agent_pb2.PulumiVersionResult:
        return agent_pb2.PulumiVersionResult(version=self.ws.pulumi_version)

    # --- streamed operations ----------------------------------------------------------------------------------

    async def _operate(self, op: str, description: str, args: Callable[[str, str], list[str]],
                       on_event: Callable[[struct_pb2.Struct], StreamMessage],
                       env_overrides: dict[str, str] | None = None,
                       watch: Callable[[dict[str, Any]], None] | None = None,
                       ) -> AsyncIterator[StreamMessage | CommandResult]:
        """Run one CLI operation: a stream message per engine event, then the CLI's :class:`CommandResult`."""
        stack = await self.ensure_stack()
        # A lock left by a CLI that died (a SIGKILLed agent, an OOM-killed container) would fail this operation
        # until someone ran `pulumi cancel`; a provably dead holder's lock goes first (pko.agent.stalelocks).
        released = await asyncio.to_thread(stalelocks.release, self.ws.cli.env, self.ws.project(), stack,
                                           since=self.started, ours=pulumicmd.started_here)
        notices = [notices_.stale_lock_released(path.name, lock.get("pid"), str(lock.get("hostname")), _now())
                   for path, lock in released]
        config_flags, config_sent = self.ws.config_flags(stack)  # plaintext config that waited for this operation
        for attempt in (1, 2):
            for notice in notices:  # the operator posts each as an event and a status line (pko.protocol.notices)
                yield on_event(eventlog.to_struct(notice))
            notices = []
            with tempfile.TemporaryDirectory(prefix=f"pko-agent-{op}-") as tmp:
                event_log = Path(tmp) / "eventlog.txt"
                run = asyncio.ensure_future(self.ws.cli.run([*args(stack, str(event_log)), *config_flags],
                                                            description=description, env_overrides=env_overrides))
                try:
                    count = 0
                    async for event in eventlog.follow(event_log, run.done):
                        count += 1
                        if watch is not None:
                            watch(event)
                        yield on_event(eventlog.to_struct(event))
                    outcome = await run
                except CommandError as err:
                    # refused on a lock of another DIY backend whose every holder is provably dead: release it and
                    # run again (nothing ran yet: the CLI checks locks before the engine starts)
                    if attempt == 1 and count == 0:
                        notices = await self._cancel_stale_locks(stack, str(err))
                        if notices:
                            continue
                    log.error("%s completed with an error", op)
                    raise errors.operation_failed(op, str(err)) from None
                except BaseException:
                    if not run.done():
                        log.info("%s interrupted; waiting for the Pulumi CLI to wind down", op)
                        run.cancel()
                        try:
                            await asyncio.wait([run])
                        except asyncio.CancelledError:
                            run.cancel()  # a second cancellation: stop waiting, kill the CLI
                            raise
                        log.info("%s interrupted: the Pulumi CLI has stopped", op)
                    raise
                log.info("%s completed (%d engine events)", op, count)
                self.ws.config_saved(stack, config_sent)
                yield outcome
                return

    async def _cancel_stale_locks(self, stack: str, output: str) -> list[dict[str, Any]]:
        """`pulumi cancel` when the CLI refused on locks all held by dead processes of this host; a notice for each
        lock it released (none: it did not)."""
        locks = stalelocks.refusing_locks(output)
        host = socket.gethostname()
        if not stalelocks.all_stale(locks, host, stalelocks.running_pulumi, self.started, pulumicmd.started_here):
            return []
        await self.ws.cli.run(["cancel", "--yes", "--stack", stack], description="failed to release a stale lock")
        released = []
        for lock in locks:
            name = lock["url"].rsplit("/", 1)[-1]
            log.warning("released the stack lock %s: its holder (pid %s on this host) is gone", name, lock["pid"])
            released.append(notices_.stale_lock_released(name, lock["pid"], host, _now()))
        return released

    async def _messages(self, op: str, description: str, args: Callable[[str, str], list[str]],
                        on_event: Callable[[struct_pb2.Struct], StreamMessage],
                        finish: Callable[[str, CommandResult], Awaitable[StreamMessage]],
                        env_overrides: dict[str, str] | None = None,
                        watch: Callable[[dict[str, Any]], None] | None = None) -> AsyncIterator[StreamMessage]:
        """Events while the operation runs (each also to `watch`, as the engine wrote it), then the result `finish`
        builds; any failure raised as an :class:`AgentError`."""
        try:
            stack = await self.ensure_stack()
            outcome: CommandResult | None = None
            async for item in self._operate(op, description, args, on_event, env_overrides, watch):
                if isinstance(item, CommandResult):
                    outcome = item
                else:
                    yield item
            assert outcome is not None
            yield await finish(stack, outcome)
        except AgentError:
            raise
        except CommandError as err:
            raise AgentError(grpc.StatusCode.UNKNOWN, str(err)) from None
        except Exception as err:  # like a Go handler returning a plain error: UNKNOWN with its text
            log.exception("unexpected error")
            raise AgentError(grpc.StatusCode.UNKNOWN, str(err)) from None

    def _busy(self) -> AgentError | None:
        """The refusal of a new operation while a kept `up` still runs (its CLI holds the stack)."""
        held = self._kept
        if held is None or not held.running:
            return None
        message = (f"an up (operation {held.operation_id}, started {held.started.isoformat()}) is still running in "
                   "this workspace")
        # as the CLI's own refusal of a locked stack; the operator retries it as a passing failure (pko.protocol)
        return AgentError(grpc.StatusCode.FAILED_PRECONDITION, message,
                          agent_pb2.PulumiErrorInfo(code=409, reason="UpdateConflict", message=message))

    async def _stream(self, context: grpc.aio.ServicerContext[Any, Any], op: str, description: str,
                      args: Callable[[str, str], list[str]], on_event: Callable[[struct_pb2.Struct], StreamMessage],
                      finish: Callable[[str, CommandResult], Awaitable[StreamMessage]],
                      env_overrides: dict[str, str] | None = None,
                      watch: Callable[[dict[str, Any]], None] | None = None) -> AsyncIterator[StreamMessage]:
        """The operation's messages for this call; errors end the call with a status."""
        try:
            busy = self._busy()
            if busy is not None:
                raise busy
            async for message in self._messages(op, description, args, on_event, finish, env_overrides, watch):
                yield message
        except AgentError as err:
            await _abort(context, err)

    async def _follow(self, context: grpc.aio.ServicerContext[Any, Any],
                      held: kept.Kept[agent_pb2.UpStream]) -> AsyncIterator[agent_pb2.UpStream]:
        """A kept `up`'s messages for this call; its failure ends the call with a status. The call going away
        leaves the `up` running."""
        try:
            async for message in held.follow():
                yield message
        except kept.Cancelled as err:
            await _abort(context, AgentError(grpc.StatusCode.CANCELLED, str(err)))
        except AgentError as err:
            await _abort(context, err)

    def _summarize(self, result: agent_pb2.UpResult | agent_pb2.RefreshResult | agent_pb2.DestroyResult,
                   outcome: CommandResult, summary: agent_pb2.UpdateSummary | None) -> None:
        result.stdout, result.stderr = outcome.stdout, outcome.stderr
        result.project_info.CopyFrom(self.ws.project_info())
        if summary is not None:
            result.summary.CopyFrom(summary)
        link = results.permalink(outcome.stdout)
        if link:
            result.permalink = link

    async def _resumed(self, after: datetime.datetime) -> agent_pb2.UpResult:
        """The result of the stack's latest update when it is the one a restarted operator lost (it began at or
        after `after` and is over); FAILED_PRECONDITION otherwise (pko.agent.resume)."""
        stack = await self.ensure_stack()
        history = await self.ws.latest_history(stack)
        if not resume.finished_since(history, after):
            log.info("up: no update of the stack finished since %s: nothing to resume", after.isoformat())
            raise AgentError(grpc.StatusCode.FAILED_PRECONDITION,
                             f"no update of the stack began at or after {after.isoformat()} and finished: "
                             "nothing to resume")
        log.info("up: the stack's latest update began after %s and is over: returning its result, not running up "
                 "again", after.isoformat())
        result = agent_pb2.UpResult()
        for key, value in (await self.ws.outputs(stack)).items():
            result.outputs[key].CopyFrom(value)
        self._summarize(result, CommandResult("", "", 0), results.update_summary(history))
        return result

    async def _outputs(self, stack: str, seen: _Seen, targeted: bool) -> dict[str, agent_pb2.OutputValue]:
        """The stack's outputs after an operation: from its engine events when they hold them all in the clear, with
        one `stack output --show-secrets` when some need decrypting, or as the reference reads them (two listings)
        when the events did not report the root Stack's outputs or only some resources were targeted."""
        if seen.outputs is None or targeted:
            return await self.ws.outputs(stack)
        if not results.has_signature(seen.outputs):
            return results.outputs_from_event(seen.outputs, None)
        return results.outputs_from_event(seen.outputs, await self.ws.plain_outputs(stack))

    async def _summary(self, stack: str, seen: _Seen, request: agent_pb2.UpRequest | agent_pb2.RefreshRequest
                       | agent_pb2.DestroyRequest) -> agent_pb2.UpdateSummary | None:
        """The operation's summary, from the agent's own clock and the engine's result when the request named the
        message (the CLI records an empty one as the git commit's message); else the stack's history."""
        if not request.message or seen.result is None:
            return await self.ws.latest_summary(stack)
        return results.own_summary(seen.started, datetime.datetime.now(datetime.UTC), seen.result, request.message)

    async def Up(self, request: agent_pb2.UpRequest,
                 context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[agent_pb2.UpStream]:
        seen = _Seen()

        async def finish(stack: str, outcome: CommandResult) -> agent_pb2.UpStream:
            result = agent_pb2.UpResult()
            # The `up` is over, and until its result reaches the operator a restart would make it run again
            # (pko.controllers.update.reconciler): what the engine events told is used as is, and the CLI is asked
            # (read-only calls, at once) only for what they cannot tell (pko.agent.results).
            outputs, summary = await asyncio.gather(self._outputs(stack, seen, bool(request.target)),
                                                    self._summary(stack, seen, request))
            for key, value in outputs.items():
                result.outputs[key].CopyFrom(value)
            self._summarize(result, outcome, summary)
            return agent_pb2.UpStream(result=result)

        if request.HasField("resume_after"):
            held = self._kept
            if held is not None and request.operation_id and held.operation_id == request.operation_id:
                # the operator lost its call, not the `up`: it ran on here (pko.agent.kept)
                log.info("up: following the kept operation %s (%s)", held.operation_id,
                         "running" if held.running else "over")
                async for message in self._follow(context, held):
                    yield message
                return
            try:
                resumed = await self._resumed(request.resume_after.ToDatetime(tzinfo=datetime.UTC))
            except AgentError as err:
                await _abort(context, err)
                return
            except CommandError as err:
                await _abort(context, AgentError(grpc.StatusCode.UNKNOWN, str(err)))
                return
            if request.HasField("plan_digest"):
                self.plans.discard(request.plan_digest)  # the `up` that finished applied it
            yield agent_pb2.UpStream(result=resumed)
            return
        extra: list[str] = []
        if request.HasField("plan_digest"):
            try:
                extra = [f"--plan={self.plans.path_of(request.plan_digest)}"]
            except AgentError as err:
                await _abort(context, err)
                return

        async def run() -> AsyncIterator[agent_pb2.UpStream]:
            try:
                async for message in self._messages(
                        "up", "failed to run update",
                        lambda stack, events: cliargs.up_args(request, stack, events, self.pulumi_log_level) + extra,
                        lambda event: agent_pb2.UpStream(event=event), finish, watch=seen.watch):
                    yield message
            finally:
                if request.HasField("plan_digest"):
                    self.plans.discard(request.plan_digest)

        busy = self._busy()
        if busy is not None:
            await _abort(context, busy)
            return
        if not request.operation_id:
            try:
                async for message in run():
                    yield message
            except AgentError as err:
                await _abort(context, err)
            return
        self._kept = held = kept.Kept(request.operation_id, run(), abandon_after=self.abandon_after)
        log.info("up: kept running as operation %s", request.operation_id)
        async for message in self._follow(context, held):
            yield message

    # --- pko's OperationControl -------------------------------------------------------------------------------

    async def Cancel(self, request: agent_pb2.CancelRequest,
                     context: grpc.aio.ServicerContext[Any, Any]) -> agent_pb2.CancelResult:
        held = self._kept
        if held is None or not request.operation_id or held.operation_id != request.operation_id:
            await _abort(context, AgentError(grpc.StatusCode.NOT_FOUND,
                                             f"no operation {request.operation_id!r} is kept in this workspace"))
            raise AssertionError("unreachable: abort raises")
        return agent_pb2.CancelResult(running=await held.cancel())

    async def Preview(self, request: agent_pb2.PreviewRequest,
                      context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[agent_pb2.PreviewStream]:
        plan_file = self.plans.scratch() if request.save_plan else None
        changes: dict[str, int] = {}

        async def finish(stack: str, outcome: CommandResult) -> agent_pb2.PreviewStream:
            # Like the reference, a preview result carries no update summary.
            result = agent_pb2.PreviewResult(stdout=outcome.stdout, stderr=outcome.stderr,
                                             project_info=self.ws.project_info())
            link = results.permalink(outcome.stdout)
            if link:
                result.permalink = link
            if plan_file is not None:
                result.plan_digest = self.plans.keep(plan_file)
                for kind, count in changes.items():
                    result.change_summary[kind] = count
            return agent_pb2.PreviewStream(result=result)

        def on_event(event: struct_pb2.Struct) -> agent_pb2.PreviewStream:
            if plan_file is not None and "summaryEvent" in event:
                changes.update(plans.change_summary(json_format.MessageToDict(event)) or {})
            return agent_pb2.PreviewStream(event=event)

        def args(stack: str, events: str) -> list[str]:
            extra = [f"--save-plan={plan_file}"] if plan_file is not None else []
            return cliargs.preview_args(request, stack, events, self.pulumi_log_level) + extra

        try:
            async for message in self._stream(context, "preview", "failed to run preview", args, on_event, finish):
                yield message
        finally:
            if plan_file is not None:
                plan_file.unlink(missing_ok=True)  # kept under its digest on success; a failed one is dropped

    async def Refresh(self, request: agent_pb2.RefreshRequest,
                      context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[agent_pb2.RefreshStream]:
        seen = _Seen()

        async def finish(stack: str, outcome: CommandResult) -> agent_pb2.RefreshStream:
            result = agent_pb2.RefreshResult()
            self._summarize(result, outcome, await self._summary(stack, seen, request))
            return agent_pb2.RefreshStream(result=result)

        async for message in self._stream(
                context, "refresh", "failed to refresh stack",
                lambda stack, events: cliargs.refresh_args(request, stack, events, self.pulumi_log_level),
                lambda event: agent_pb2.RefreshStream(event=event), finish, watch=seen.watch):
            yield message

    async def Destroy(self, request: agent_pb2.DestroyRequest,
                      context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[agent_pb2.DestroyStream]:
        deleted: list[str] = []
        changes: dict[str, int] = {}
        seen = _Seen()

        async def finish(stack: str, outcome: CommandResult) -> agent_pb2.DestroyStream:
            result = agent_pb2.DestroyResult()
            if request.preview_only:  # pko: nothing was deleted; say what would be
                result.stdout, result.stderr = outcome.stdout, outcome.stderr
                result.project_info.CopyFrom(self.ws.project_info())
                result.plan_digest = plans.destroy_digest(deleted)
                result.resources.extend(sorted(set(deleted)))
                for kind, count in changes.items():
                    result.change_summary[kind] = count
                return agent_pb2.DestroyStream(result=result)
            self._summarize(result, outcome, await self._summary(stack, seen, request))
            if request.remove:
                # Removed after the summary is read, as the Automation API does.
                await self.ws.remove_stack(stack)
                log.info("removed the stack %s", stack)
            return agent_pb2.DestroyStream(result=result)

        def on_event(event: struct_pb2.Struct) -> agent_pb2.DestroyStream:
            if request.preview_only and ("resourcePreEvent" in event or "summaryEvent" in event):
                plain = json_format.MessageToDict(event)
                urn = plans.deleted_urn(plain)
                if urn is not None:
                    deleted.append(urn)
                changes.update(plans.change_summary(plain) or {})
            return agent_pb2.DestroyStream(event=event)

        async for message in self._stream(
                context, "destroy", "failed to destroy stack",
                lambda stack, events: cliargs.destroy_args(request, stack, events, self.pulumi_log_level),
                on_event, finish,
                # `--preview-only` refuses a confirmation skipped by the environment (PULUMI_SKIP_CONFIRMATIONS)
                {"PULUMI_SKIP_CONFIRMATIONS": "false"} if request.preview_only else None, seen.watch):
            yield message
