"""A failed operation's status message reaches the operator whole, however long: the reference agent ends a failed
`up` with the CLI's entire error output as the status message, which travels in a trailer, and gRPC's C core
refuses trailers over 16 KiB by default ("Stream removed (received metadata size exceeds hard limit ...)"), losing
the error: a Kubernetes program's failure with long diagnostics came back as that. Real gRPC, the agent protocol's
stub, a server that fails the way the reference agent does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from pko.controllers import connect
from pko.protocol.proto import agent_pb2, agent_pb2_grpc

MESSAGE = "up failed: " + "\n".join(f"    error: resource {i} already exists: configmaps \"app-settings\"" * 2
                                    for i in range(400)) + "\nthe end of the CLI's output"


class _Failing(agent_pb2_grpc.AutomationServiceServicer):
    async def WhoAmI(self, request: agent_pb2.WhoAmIRequest, context: grpc.aio.ServicerContext[Any, Any],
                     ) -> agent_pb2.WhoAmIResult:
        await context.abort(grpc.StatusCode.UNKNOWN, MESSAGE)


@pytest.fixture
async def address() -> AsyncIterator[str]:
    server = grpc.aio.server()
    agent_pb2_grpc.add_AutomationServiceServicer_to_server(_Failing(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield f"127.0.0.1:{port}"
    await server.stop(None)


async def _call(channel: grpc.aio.Channel) -> grpc.aio.AioRpcError:
    try:
        await agent_pb2_grpc.AutomationServiceStub(channel).WhoAmI(agent_pb2.WhoAmIRequest(), timeout=10)
    except grpc.aio.AioRpcError as err:
        return err
    finally:
        await channel.close(None)
    raise AssertionError("the call did not fail")


async def test_a_long_status_message_reaches_the_operator_whole(address: str) -> None:
    assert len(MESSAGE.encode()) > 32 * 1024
    err = await _call(connect.open_channel(address))
    assert err.code() == grpc.StatusCode.UNKNOWN
    assert err.details() == MESSAGE
    # what a channel with gRPC's default limits makes of it: the error is lost
    default = await _call(grpc.aio.insecure_channel(address))
    assert default.details() != MESSAGE
