"""The client side of ``agent.AutomationService`` as the operator calls it: a typed stub and its failures.

The generated ``AutomationServiceStub`` is typed by mypy-protobuf's ``agent_pb2_grpc.pyi``: on a ``grpc.aio``
channel it is an :data:`AutomationStub` (``AutomationServiceAsyncStub``, which exists only for the type checker).
:func:`failure` turns a failed call into the (reason, message) the operator reports, preferring the agent's
``PulumiErrorInfo`` detail.

Nothing here opens connections or mints tokens (the operator's ``pko.controllers.connect`` does); it must stay a
thin, typed shim.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol, TypeAlias

import grpc
import grpc.aio

from pko.protocol import status
from pko.protocol.proto import agent_pb2, agent_pb2_grpc

if TYPE_CHECKING:
    AutomationStub: TypeAlias = agent_pb2_grpc.AutomationServiceAsyncStub
    ControlStub: TypeAlias = agent_pb2_grpc.OperationControlAsyncStub

StreamMessage: TypeAlias = (
    agent_pb2.PreviewStream | agent_pb2.RefreshStream | agent_pb2.UpStream | agent_pb2.DestroyStream
)


class StreamCall(Protocol):
    """Any of the four operations' server-streaming calls (``Up``, ``Preview``, ``Refresh``, ``Destroy``): iterate
    it for messages; ``cancel()`` interrupts the operation on the agent."""

    def __aiter__(self) -> AsyncIterator[StreamMessage]: ...

    def cancel(self) -> bool: ...


error_info = status.error_info


def stub(channel: grpc.aio.Channel) -> AutomationStub:
    """The generated stub on `channel`, typed."""
    return agent_pb2_grpc.AutomationServiceStub(channel)


def control_stub(channel: grpc.aio.Channel) -> ControlStub:
    """pko's ``OperationControl`` stub on `channel` (only an agent announcing "keep-running" serves it), typed."""
    return agent_pb2_grpc.OperationControlStub(channel)


def pulumi_error_info(err: grpc.aio.AioRpcError) -> agent_pb2.PulumiErrorInfo | None:
    """The ``PulumiErrorInfo`` detail the agent attached to a failed call (e.g. UpdateConflict), if any."""
    metadata: status.Metadata | None = err.trailing_metadata()  # type: ignore[assignment]  # grpc-stubs: too narrow
    return status.error_info(metadata)


def failure(err: grpc.aio.AioRpcError) -> tuple[str, str]:
    """(reason, message) of a failed call: the ``PulumiErrorInfo`` detail when present, else the code's name
    (e.g. ``Unavailable``) and the call's details."""
    info = pulumi_error_info(err)
    if info is not None:
        return info.reason, info.message
    reason = err.code().name.title().replace("_", "") if err.code() else "Unknown"
    return reason, err.details() or ""
