"""The short requests' HTTP/1.1 client against a loopback server that answers as scripted: bodies by length, chunked
and to the end, keep-alive and its limits, and each way of getting no answer."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from pko.kube import http1
from pko.runtime import eventloop
from pko.testing import testca

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, bytes], Awaitable[bool]]
"""Answers one request (its bytes given); False ends the connection."""


async def _read_request(reader: asyncio.StreamReader) -> bytes | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + await reader.readexactly(length)


class Server:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[bytes] = []
        self.connections = 0
        self.at_once = self.most_at_once = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while (request := await _read_request(reader)) is not None:
                self.requests.append(request)
                self.at_once += 1
                self.most_at_once = max(self.most_at_once, self.at_once)
                try:
                    if not await self.handler(reader, writer, request):
                        break
                finally:
                    self.at_once -= 1
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def serving(handler: Handler, tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None,
                  ) -> AsyncIterator[tuple[Server, http1.Pool]]:
    """A server answering with `handler`, and a pool of connections to it (over TLS with `tls`: the server's
    context and the client's)."""
    server = Server(handler)
    listening = await asyncio.start_server(server.serve, "127.0.0.1", 0, ssl=tls[0] if tls else None)
    port = listening.sockets[0].getsockname()[1]
    pool = http1.Pool("127.0.0.1", port, tls[1] if tls else None, limit=4)
    try:
        yield server, pool
    finally:
        pool.close()
        listening.close()
        await listening.wait_closed()


def answer(body: bytes, *, status: str = "200 OK", extra: str = "") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


async def _get(pool: http1.Pool, target: str = "/api/v1/namespaces/a/configmaps/b", *, method: str = "GET",
               body: bytes | None = None, timeout: float = 5.0) -> http1.Answer:
    return await pool.request(method, target, b"Accept: application/json\r\n", body, timeout=timeout)


async def test_a_kept_connection_carries_the_next_request() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> bool:
        writer.write(answer(b'{"n": %d}' % len(request)))
        return True

    async with serving(handler) as (server, pool):
        first = await _get(pool)
        second = await _get(pool, method="POST", body=b'{"a": 1}')
        assert (first.status, second.status) == (200, 200)
        assert server.connections == 1
        assert pool.opened == 1
        sent = server.requests[1]
        assert sent.startswith(b"POST /api/v1/namespaces/a/configmaps/b HTTP/1.1\r\nHost: 127.0.0.1:")
        assert b"Content-Length: 8\r\n\r\n" in sent
        assert sent.endswith(b'{"a": 1}')
        assert b"Content-Length" not in server.requests[0]


async def test_a_chunked_body_with_extensions_and_trailers_and_interim_answers() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> bool:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        writer.write(b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n")
        for part in (b"5;ext=1\r\nhello\r\n", b"1\r\n \r\n", b"5\r\nworld\r\n", b"0\r\nX-Trailer: t\r\n\r\n"):
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(0.01)  # the answer in pieces
        return True

    async with serving(handler) as (_server, pool):
        assert await _get(pool) == http1.Answer(201, b"hello world")
        assert await _get(pool) == http1.Answer(201, b"hello world")
        assert pool.opened == 1


async def test_connection_close_and_a_body_to_the_end_are_not_kept() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> bool:
        if b"/close" in request:
            writer.write(answer(b"closing", extra="Connection: close\r\n"))
        else:
            writer.write(b"HTTP/1.1 200 OK\r\n\r\nall of it")
        return False

    async with serving(handler) as (_server, pool):
        assert (await _get(pool, "/close")).body == b"closing"
        assert (await _get(pool, "/end")).body == b"all of it"
        assert (await _get(pool, "/end")).body == b"all of it"
        assert pool.opened == 3


async def test_an_idle_connection_the_server_closed_is_replaced_and_the_request_sent_again() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> bool:
        writer.write(answer(b"{}"))
        await writer.drain()
        return False  # closes after each answer, saying nothing (an idle keep-alive ending)

    async with serving(handler) as (_server, pool):
        await _get(pool)
        for _ in range(20):  # the close reaches the client: the kept connection is seen as ended and dropped
            await asyncio.sleep(0.01)
        assert (await _get(pool, method="POST", body=b"{}")).status == 200
        assert (pool.opened, pool.resent) == (2, 0)  # dropped before use, not tried


async def test_a_kept_connection_closed_as_the_request_goes_out_is_retried_once() -> None:
    """The race the retry is for: a kept connection ends with no byte of an answer to the request just sent (the
    server's idle timeout met it). Here the server ends the first connection at its second request."""
    seen: dict[int, int] = {}

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> bool:
        seen[id(writer)] = seen.get(id(writer), 0) + 1
        if seen[id(writer)] == 2 and len(seen) == 1:
            return False  # closes, answering nothing
        writer.write(answer(b"{}"))
        return True

    async with serving(handler) as (server, pool):
        await _get(pool)
        assert (await _get(pool, method="POST", body=b"{}")).status == 200
        assert (pool.opened, pool.resent) == (2, 1)
        assert len(server.requests) == 3


async def test_an_answer_cut_short_is_no_answer_and_never_sent_twice() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
        await writer.drain()
        return False

    async with serving(handler) as (server, pool):
        with pytest.raises(http1.Unanswered) as raised:
            await _get(pool, method="POST", body=b"{}")
        assert raised.value.reason == "closed"
        assert len(server.requests) == 1
        assert pool.resent == 0


async def test_refused_silent_and_malformed() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    refused = http1.Pool("127.0.0.1", port, None, limit=1)
    with pytest.raises(http1.Unanswered) as raised:
        await _get(refused)
    assert raised.value.reason == "connect"

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> bool:
        await asyncio.sleep(10)
        return False

    async with serving(silent) as (_server, pool):
        with pytest.raises(http1.Unanswered) as raised:
            await _get(pool, timeout=0.2)
        assert raised.value.reason == "timeout"
        assert not pool._idle  # a connection left mid-request is never handed out again

    async def garbled(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> bool:
        writer.write(b"SSH-2.0-OpenSSH_9\r\n\r\n")
        return True

    async with serving(garbled) as (_server, pool):
        with pytest.raises(http1.Unanswered) as raised:
            await _get(pool)
        assert raised.value.reason == "protocol"
        assert not pool._idle


async def test_at_most_limit_requests_at_once() -> None:
    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> bool:
        await asyncio.sleep(0.05)
        writer.write(answer(b"{}"))
        return True

    async with serving(slow) as (server, pool):
        answers = await asyncio.gather(*(_get(pool) for _ in range(10)))
        assert [a.status for a in answers] == [200] * 10
        assert server.most_at_once == 4
        assert pool.opened == 4


async def test_slots_are_given_in_the_order_asked_and_never_more_than_the_limit() -> None:
    slots = http1.Slots(2)
    held: list[int] = []
    order: list[int] = []
    most = 0

    async def use(n: int) -> None:
        nonlocal most
        async with slots:
            order.append(n)
            held.append(n)
            most = max(most, len(held))
            await asyncio.sleep(0.01 * (n % 3))
            held.remove(n)

    await asyncio.gather(*(use(n) for n in range(12)))
    assert order == list(range(12))
    assert most == 2
    assert slots.free == 2


async def test_a_cancelled_waiter_takes_no_slot_and_one_given_as_it_was_cancelled_is_passed_on() -> None:
    slots = http1.Slots(1)
    await slots.__aenter__()
    gone = asyncio.ensure_future(slots.__aenter__())  # waits, then is cancelled while waiting
    late = asyncio.ensure_future(slots.__aenter__())  # waits, is handed the slot, and is cancelled before it runs
    last = asyncio.ensure_future(slots.__aenter__())
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    await slots.__aexit__(None, None, None)  # `gone` is passed over, `late` is handed the slot ...
    late.cancel()  # ... and cancelled before it could use it: the slot goes on to `last`
    with pytest.raises(asyncio.CancelledError):
        await gone
    with pytest.raises(asyncio.CancelledError):
        await late
    await asyncio.wait_for(last, 5)
    assert slots.free == 0
    await slots.__aexit__(None, None, None)
    assert slots.free == 1


# --- the same client on uvloop's event loop, the operator's (pko.runtime.eventloop), and over TLS --------------------


def _tls(directory: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    issued = testca.issue(directory, "127.0.0.1")
    serving_ = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving_.load_cert_chain(issued.cert_path, issued.key_path)
    return serving_, ssl.create_default_context(cafile=str(issued.ca_path))


async def _kept_and_chunked_over_tls(tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> bool:
        if b"/chunked" in request:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for part in (b"5\r\nhello\r\n", b"0\r\n\r\n"):
                writer.write(part)
                await writer.drain()
                await asyncio.sleep(0.01)
        else:
            writer.write(answer(b'{"n": %d}' % len(request)))
        return True

    async with serving(handler, tls) as (server, pool):
        assert (await _get(pool)).status == 200
        assert await _get(pool, "/chunked") == http1.Answer(200, b"hello")
        assert (await _get(pool, method="POST", body=b"{}")).status == 200
        assert (server.connections, pool.opened) == (1, 1)


@pytest.mark.parametrize("loop", [eventloop.ASYNCIO, eventloop.UVLOOP])
def test_a_kept_connection_over_tls_on_either_loop(loop: str, tmp_path: Path) -> None:
    """uvloop's TLS transport is not asyncio's class: the client must take it as it comes."""
    eventloop.run(_kept_and_chunked_over_tls(_tls(tmp_path)), env={eventloop.ENV: loop})


ON_UVLOOP: list[Callable[[], Coroutine[Any, Any, None]]] = [
    test_a_kept_connection_carries_the_next_request,
    test_a_chunked_body_with_extensions_and_trailers_and_interim_answers,
    test_connection_close_and_a_body_to_the_end_are_not_kept,
    test_an_idle_connection_the_server_closed_is_replaced_and_the_request_sent_again,
    test_a_kept_connection_closed_as_the_request_goes_out_is_retried_once,
    test_an_answer_cut_short_is_no_answer_and_never_sent_twice,
    test_refused_silent_and_malformed,
    test_at_most_limit_requests_at_once,
    test_a_cancelled_waiter_takes_no_slot_and_one_given_as_it_was_cancelled_is_passed_on,
]


@pytest.mark.parametrize("scenario", ON_UVLOOP, ids=lambda scenario: scenario.__name__.removeprefix("test_"))
def test_on_uvloop(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    eventloop.run(scenario(), env={eventloop.ENV: eventloop.UVLOOP})
