"""An agent that never answers the call before an operation's stream (SelectStack: a backend that never answers the
CLI's first selection, a peer gone without a reset) fails the Update within its limits instead of holding it
Progressing for ever: the same idle timeout as the stream's silence. Real gRPC, the agent protocol's stub, a
server that hangs; the failure reads as passing (the Stack retries it and never counts it toward Stalled)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import grpc
import pytest

from pko.api import update as up_api
from pko.controllers import connect
from pko.controllers.update import reconciler as update_reconciler
from pko.protocol import client as agent_client
from pko.protocol import transient
from pko.protocol.proto import agent_pb2, agent_pb2_grpc


class _Hung(agent_pb2_grpc.AutomationServiceServicer):
    async def SelectStack(self, request: agent_pb2.SelectStackRequest, context: grpc.aio.ServicerContext[Any, Any],
                          ) -> agent_pb2.SelectStackResult:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


@pytest.fixture
async def address() -> AsyncIterator[str]:
    server = grpc.aio.server()
    agent_pb2_grpc.add_AutomationServiceServicer_to_server(_Hung(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield f"127.0.0.1:{port}"
    await server.stop(None)


async def test_an_agent_hung_before_the_stream_fails_the_update_within_its_idle_timeout(
        address: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(update_reconciler, "PRE_STREAM_FLOOR", 0.5)
    channel = connect.open_channel(address)
    conn = connect.Connection(address, channel, agent_client.stub(channel), (), agent_client.control_stub(channel))
    nothing = cast(Any, None)  # no call reaches the API server here
    reconciler = update_reconciler.UpdateReconciler(nothing, nothing, nothing, nothing)
    update = up_api.Update.model_validate({"metadata": {"name": "u", "namespace": "ns"}, "spec": {
        "workspaceName": "ws", "stackName": "dev", "type": up_api.UP, "idleTimeout": "2s"}})
    try:
        outcome = await asyncio.wait_for(reconciler._stream(update, conn, [], []), 60)
    finally:
        await channel.close(None)
    assert outcome.failed[0] == "True"
    assert outcome.message is not None
    assert "DEADLINE_EXCEEDED" in outcome.message
    assert transient.is_transient(None, outcome.message)
