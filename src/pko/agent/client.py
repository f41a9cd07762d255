"""A typed view of the agent's generated client stub, and the structured error a failed call may carry.

The generated ``agent_pb2_grpc.AutomationServiceStub`` has no type hints; callers under ``mypy --strict`` (the
Workspace and Update controllers) use :func:`stub` to get the same object typed by :class:`AutomationStub`, and
:func:`error_info` to read the ``PulumiErrorInfo`` detail (e.g. ``UpdateConflict``) from a failed call.

Nothing here opens connections or mints tokens; it must stay a thin, typed shim.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any, Protocol, cast

import grpc

from pko.agent import errors
from pko.agent.proto import agent_pb2, agent_pb2_grpc

Metadata = Sequence[tuple[str, str | bytes]]


class StreamCall(Protocol):
    """A server-streaming call: iterate it for messages; ``cancel()`` interrupts the operation on the agent."""

    def __aiter__(self) -> AsyncIterator[Any]: ...

    def cancel(self) -> bool: ...


class AutomationStub(Protocol):
    """The client side of ``agent.AutomationService``."""

    def WhoAmI(self, request: agent_pb2.WhoAmIRequest, *, timeout: float | None = ..., metadata: Metadata | None = ...,
               wait_for_ready: bool | None = ...) -> Awaitable[agent_pb2.WhoAmIResult]: ...

    def SelectStack(self, request: agent_pb2.SelectStackRequest, *, timeout: float | None = ...,
                    metadata: Metadata | None = ..., wait_for_ready: bool | None = ...
                    ) -> Awaitable[agent_pb2.SelectStackResult]: ...

    def Info(self, request: agent_pb2.InfoRequest, *, timeout: float | None = ..., metadata: Metadata | None = ...,
             wait_for_ready: bool | None = ...) -> Awaitable[agent_pb2.InfoResult]: ...

    def SetAllConfig(self, request: agent_pb2.SetAllConfigRequest, *, timeout: float | None = ...,
                     metadata: Metadata | None = ..., wait_for_ready: bool | None = ...
                     ) -> Awaitable[agent_pb2.SetAllConfigResult]: ...

    def AddEnvironments(self, request: agent_pb2.AddEnvironmentsRequest, *, timeout: float | None = ...,
                        metadata: Metadata | None = ..., wait_for_ready: bool | None = ...
                        ) -> Awaitable[agent_pb2.AddEnvironmentsResult]: ...

    def Install(self, request: agent_pb2.InstallRequest, *, timeout: float | None = ...,
                metadata: Metadata | None = ..., wait_for_ready: bool | None = ...
                ) -> Awaitable[agent_pb2.InstallResult]: ...

    def PulumiVersion(self, request: agent_pb2.PulumiVersionRequest, *, timeout: float | None = ...,
                      metadata: Metadata | None = ..., wait_for_ready: bool | None = ...
                      ) -> Awaitable[agent_pb2.PulumiVersionResult]: ...

    def Preview(self, request: agent_pb2.PreviewRequest, *, timeout: float | None = ...,
                metadata: Metadata | None = ..., wait_for_ready: bool | None = ...) -> StreamCall: ...

    def Refresh(self, request: agent_pb2.RefreshRequest, *, timeout: float | None = ...,
                metadata: Metadata | None = ..., wait_for_ready: bool | None = ...) -> StreamCall: ...

    def Up(self, request: agent_pb2.UpRequest, *, timeout: float | None = ..., metadata: Metadata | None = ...,
           wait_for_ready: bool | None = ...) -> StreamCall: ...

    def Destroy(self, request: agent_pb2.DestroyRequest, *, timeout: float | None = ...,
                metadata: Metadata | None = ..., wait_for_ready: bool | None = ...) -> StreamCall: ...


def stub(channel: grpc.aio.Channel) -> AutomationStub:
    """The generated stub on `channel`, typed."""
    generated = agent_pb2_grpc.AutomationServiceStub(channel)  # type: ignore[no-untyped-call]
    return cast(AutomationStub, generated)


def error_info(trailing_metadata: Sequence[tuple[str, str | bytes]] | None) -> agent_pb2.PulumiErrorInfo | None:
    """The ``PulumiErrorInfo`` detail of a failed call (from ``err.trailing_metadata()``), if it has one."""
    for key, value in trailing_metadata or ():
        if key == errors.STATUS_DETAILS_KEY and isinstance(value, bytes):
            infos = errors.decode_error_info(value)
            if infos:
                return infos[0]
    return None
