"""The operator keeps a workspace's gRPC channel between its reconciles and operations (pko.controllers.connect):
opening, readying and closing one for each reconcile was a twentieth of a fleet's operator CPU. Real gRPC against
real servers on loopback: a second connection reuses the channel, an agent at a new address gets a new one and the
old one closes once its last holder lets go, a forgotten workspace's channel closes, one that never gets ready is
not kept, and the operator's stop closes them all."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest

from pko.controllers import connect
from pko.kube import tokens

LATER = datetime.datetime(2999, 1, 1, tzinfo=datetime.UTC)


@pytest.fixture
async def servers() -> AsyncIterator[list[str]]:
    """Two gRPC servers with no services: a channel to either gets ready (HTTP/2 is all a ready channel needs)."""
    started: list[grpc.aio.Server] = []
    addresses = []
    for _ in range(2):
        server = grpc.aio.server()
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        started.append(server)
        addresses.append(f"127.0.0.1:{port}")
    yield addresses
    for server in started:
        await server.stop(None)


def _connector() -> connect.Connector:
    connector = connect.Connector(client=None)  # type: ignore[arg-type]  # tokens are given below, never asked
    for name in ("w1", "w2"):
        connector._tokens[connect.audience("ns", name)] = tokens.Token("secret", LATER)
    return connector


def _shut(channel: grpc.aio.Channel) -> bool:
    return channel.get_state() == grpc.ChannelConnectivity.SHUTDOWN


async def test_a_workspace_keeps_its_channel_until_its_agent_moves(servers: list[str]) -> None:
    connector = _connector()
    first = await connector.connect("ns", "w1", servers[0], 5)
    await first.close()
    again = await connector.connect("ns", "w1", servers[0], 5)
    assert again.channel is first.channel  # kept: no new channel, no new dial
    assert not _shut(again.channel)
    other = await connector.connect("ns", "w2", servers[0], 5)
    assert other.channel is not again.channel  # one channel a workspace: another workspace's token never rides it
    # the agent moved (a new pod, a new local agent): a new channel; the old one closes when its holder lets go
    moved = await connector.connect("ns", "w1", servers[1], 5)
    assert moved.channel is not again.channel
    assert not _shut(again.channel)  # still held by a call
    await again.close()
    assert _shut(again.channel)
    await moved.close()
    await other.close()
    await connector.forget("ns", "w2")  # the workspace was deleted, or its agent stopped
    assert _shut(other.channel)
    assert not _shut(moved.channel)
    await connector.close()  # the operator stops
    assert _shut(moved.channel)


async def test_a_channel_that_never_gets_ready_is_not_kept(servers: list[str]) -> None:
    connector = _connector()
    with pytest.raises(connect.ConnectionFailed, match="timed out"):
        await connector.connect("ns", "w1", "127.0.0.1:1", 0.3)  # nothing listens on port 1
    assert not connector._kept
    conn = await connector.connect("ns", "w1", servers[0], 5)
    await conn.close()
    await conn.close()  # a second close lets go of nothing more
    assert connector._kept[("ns", "w1")].holders == 0
    await connector.close()


async def test_idle_channels_beyond_the_limit_are_closed_least_recently_used_first(
        servers: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connect, "KEPT", 2)
    connector = _connector()
    for name in ("w3", "w4"):
        connector._tokens[connect.audience("ns", name)] = tokens.Token("secret", LATER)
    held = await connector.connect("ns", "w1", servers[0], 5)  # held: never closed for the limit
    idle = await connector.connect("ns", "w2", servers[0], 5)
    await idle.close()
    third = await connector.connect("ns", "w3", servers[0], 5)
    await asyncio.sleep(0.1)  # the closing runs in a task of its own
    assert _shut(idle.channel)
    assert not _shut(held.channel)
    assert set(connector._kept) == {("ns", "w1"), ("ns", "w3")}
    for conn in (held, third):
        await conn.close()
    await connector.close()
