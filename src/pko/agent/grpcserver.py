"""The agent's gRPC server: the service behind an optional auth interceptor, and a graceful shutdown.

Messages up to 400 MiB are accepted and sent (large stacks produce large outputs and events). Shutdown follows
the reference: the first SIGTERM/SIGINT interrupts every running Pulumi CLI (Ctrl-C) and stops accepting calls
while the running ones finish, then waits for every interrupted CLI command to wind down; a second signal exits
at once with status 1. Then what the CLI left running goes too (:mod:`pko.agent.orphans`: the agent adopts the
processes its CLI orphans). A SIGTERM that comes after our parent died is not a second signal: the local runtime's
operator is threaded, and the death signal it leaves its agents (PR_SET_PDEATHSIG) comes once per exiting thread —
nor is one within two seconds of the first (those threads exit before the agent is re-parented). Should that
signal never come, the agent sees its parent exit all the same (:func:`pko.agent.lifeline.watch`) and shuts down
as on the first SIGTERM.

It must never log request contents or tokens.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

from pko.agent import lifeline, orphans
from pko.agent.errors import AgentError
from pko.agent.service import AutomationService
from pko.protocol.proto import agent_pb2_grpc

log = logging.getLogger("pko.agent.grpc")

MAX_MESSAGE_BYTES = 400 * 1024 * 1024
#: A SIGTERM this soon after the first is the same news (a dying parent's death signal, once per thread).
SAME_NEWS = 2.0
SHUTDOWN_GRACE = 3600.0  # like Go's GracefulStop, wait for running operations (the pod's grace period bounds it)

Context = grpc.aio.ServicerContext[Any, Any]


if TYPE_CHECKING:
    from pko.agent.auth import KubeAuth

    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:  # not generic at run time
    _Interceptor = grpc.aio.ServerInterceptor


class AuthInterceptor(_Interceptor):
    """Refuses a call unless :class:`KubeAuth` accepts its bearer token."""

    def __init__(self, auth: KubeAuth):
        self.auth = auth

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler: Any = await continuation(handler_call_details)
        if handler is None:
            return None  # type: ignore[return-value]  # no such method: let grpc answer UNIMPLEMENTED
        auth = self.auth

        async def check(context: Context) -> None:
            try:
                await auth.check(context.invocation_metadata())
            except AgentError as err:
                await context.abort(err.rpc.code, err.rpc.message)

        if handler.unary_unary is not None:
            unary: Any = handler.unary_unary

            async def unary_unary(request: Any, context: Context) -> Any:
                await check(context)
                return await unary(request, context)

            return grpc.unary_unary_rpc_method_handler(
                unary_unary, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        if handler.unary_stream is not None:
            stream: Any = handler.unary_stream

            async def unary_stream(request: Any, context: Context) -> AsyncIterator[Any]:
                await check(context)
                async for message in stream(request, context):
                    yield message

            return grpc.unary_stream_rpc_method_handler(
                unary_stream, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        return handler  # type: ignore[no-any-return]


def build_server(service: AutomationService, auth: KubeAuth | None = None) -> grpc.aio.Server:
    interceptors = [AuthInterceptor(auth)] if auth is not None else []
    server = grpc.aio.server(
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            # gRPC turns SO_REUSEPORT on by default: a second agent could then bind a busy port and take half of
            # its connections (with the local runtime, another workspace's agent). One port, one agent.
            ("grpc.so_reuseport", 0),
        ],
    )
    agent_pb2_grpc.add_AutomationServiceServicer_to_server(service, server)
    agent_pb2_grpc.add_OperationControlServicer_to_server(service, server)  # pko: kept `up`s (pko.agent.kept)
    return server


async def serve(service: AutomationService, host: str, port: int, auth: KubeAuth | None = None,
                on_listening: Callable[[int], None] | None = None) -> None:
    """Serve until the first SIGTERM/SIGINT, then shut down gracefully (a second signal exits immediately)."""
    server = build_server(service, auth)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"unable to listen on {host}:{port}")
    await server.start()
    log.info("server listening on %s:%d", host, bound)

    adopted = orphans.adopt()  # what the CLI orphans is ours to stop when we stop (see orphans.py)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = 0
    parent = os.getppid()

    first_at = 0.0

    def on_signal(signum: int) -> None:
        nonlocal signals, first_at
        if signals and signum == signal.SIGTERM and (os.getppid() != parent
                                                     or time.monotonic() - first_at < SAME_NEWS):
            # Our parent died (the local runtime's operator, SIGKILLed): its death signal (PR_SET_PDEATHSIG) comes
            # once per thread of the dying operator — while its other threads still run, so we may not have been
            # re-parented yet — so this SIGTERM is the same news again, not a second request to hurry; exiting
            # now would kill the CLIs mid-cancel.
            log.info("SIGTERM again from the parent's death: still winding down")
            return
        signals += 1
        if signals > 1:
            log.warning("second signal (%s): exiting immediately", signal.Signals(signum).name)
            service.ws.cli.kill_all()
            orphans.kill_now()  # what the CLI orphaned would otherwise outlive us under init
            os._exit(1)
        first_at = time.monotonic()
        log.info("shutting down the server (%s)", signal.Signals(signum).name)
        service.cancel()
        stop.set()

    def parent_gone(pid: int) -> None:
        if signals:
            return  # its death signal came first: already winding down
        log.info("the operator that started this agent (pid %d) has exited, and no death signal has come", pid)
        on_signal(signal.SIGTERM)

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    unwatch = lifeline.watch(loop, parent_gone)  # the `local` runtime's operator; nothing in a pod
    try:
        if on_listening is not None:  # once a SIGTERM stops it gracefully: whoever is told may stop it at once
            on_listening(bound)
        await stop.wait()
        await server.stop(SHUTDOWN_GRACE)
        # A call whose client went away (a SIGKILLed operator) ends at once, while its CLI still winds down from
        # the Ctrl-C; exiting now would kill that CLI mid-cancel — leaving its stack locked and its plugins (each in
        # a process group of its own) running. Wait for it.
        if service.ws.cli.running:
            log.info("waiting for %d Pulumi CLI command(s) to wind down", service.ws.cli.running)
            killed = await service.ws.cli.wind_down(service.ws.cli.interrupt_grace + 5.0)
            if killed:
                log.warning("killed %d Pulumi CLI command(s) that did not wind down in time", killed)
        if adopted and not service.ws.cli.running:
            # what a cancelled CLI left running (its language host, plugins) was re-parented to us: stop it
            await orphans.stop_all()
    finally:
        unwatch()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    log.info("server stopped")
