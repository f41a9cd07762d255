"""One port, one agent: a second agent server cannot bind a port another one is serving (no SO_REUSEPORT),
so the operator never reaches the wrong workspace's agent."""

from __future__ import annotations

import pytest

from pko.agent import grpcserver
from pko.protocol.proto import agent_pb2_grpc
from pko.testing import ports


class _Unimplemented(agent_pb2_grpc.AutomationServiceServicer, agent_pb2_grpc.OperationControlServicer):
    """Both services the agent serves, every method answering UNIMPLEMENTED."""


async def test_a_busy_port_is_refused() -> None:
    port = ports.free_port()
    first = grpcserver.build_server(_Unimplemented())  # type: ignore[arg-type]
    assert first.add_insecure_port(f"127.0.0.1:{port}") == port
    await first.start()
    try:
        second = grpcserver.build_server(_Unimplemented())  # type: ignore[arg-type]
        with pytest.raises(RuntimeError):
            second.add_insecure_port(f"127.0.0.1:{port}")
    finally:
        await first.stop(None)
