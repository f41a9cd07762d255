"""A small HTTP/1.1 client for the API client's short requests: a pool of keep-alive connections to one server, a
request written as one buffer, the answer's status and whole body read back.

Why not aiohttp for these: at fleet scale the operator's CPU follows its request count (some 30 requests a Stack,
docs/performance.md), and aiohttp's request machinery (URL objects, header multidicts, cookie jar, tracing, response
objects) cost about 0.3 ms of the client's CPU for a GET of a small object from a loopback API server, where writing
the request and parsing the answer here costs about 0.15 (``python -m bench.requestcost``). aiohttp still carries
the watches (:meth:`pko.kube.transport.Transport.stream`) and every request through a proxy.

What it does: ``Content-Length`` and ``chunked`` bodies, keep-alive (a connection goes back to the pool once its
answer was read whole, unless the server said ``Connection: close``), at most `limit` requests at once, one deadline
for the whole request (waiting for a connection included). What it does not: proxies, redirects, compression,
``Expect: 100-continue``, HTTP/2.

Failures: no answer at all raises :class:`Unanswered` (refused, reset, closed early, timed out, a malformed answer),
with `reason` saying which; the caller maps it. A request sent on a kept connection that the server had closed
meanwhile (its end of an idle keep-alive, which meets a request now and then) is sent once more on a new connection,
whatever its method, as Go's own HTTP client does: the server closed it without reading the request.

Must never: hand a connection back to the pool before its answer was read whole, or after a failure or a
cancellation in the middle of one.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import typing
from dataclasses import dataclass

MAX_HEADER = 64 * 1024
"""The most a status line and headers may take: more is a malformed answer (an API server sends a few hundred
bytes)."""


class Unanswered(Exception):
    """No complete answer: `reason` is ``connect``, ``timeout``, ``closed`` (the connection ended before the answer
    did), ``protocol`` (not an HTTP/1.1 answer) or ``io`` (an error of the socket)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes


class _Closed(Exception):
    """The connection ended; `received` says whether any byte of an answer had come."""

    def __init__(self, received: bool, cause: BaseException | None) -> None:
        super().__init__(str(cause) if cause else "the server closed the connection")
        self.received = received


class _Connection(asyncio.Protocol):
    """One connection: the bytes received and not yet parsed, and a waiter for more."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.ended = False
        self.error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport, though not asyncio's class on every loop (uvloop's TLS transport is its own)
        self.transport = typing.cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._wake()

    def eof_received(self) -> bool:
        self.ended = True
        self._wake()
        return False  # close our end too

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self.error = exc
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    @property
    def usable(self) -> bool:
        """Still open, with nothing unread: fit to carry the next request."""
        return not self.ended and not self.buffer and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.ended = True

    async def _more(self, received: bool) -> None:
        if self.ended:
            raise _Closed(received, self.error)
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
        if self.ended and not self.buffer:
            raise _Closed(received, self.error)

    async def _take_line(self, received: bool) -> bytes:
        while (end := self.buffer.find(b"\r\n")) < 0:
            if len(self.buffer) > MAX_HEADER:
                raise Unanswered("protocol", "a line of the answer is too long")
            await self._more(received)
        line = bytes(self.buffer[:end])
        del self.buffer[:end + 2]
        return line

    async def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            await self._more(True)
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    async def answer(self, method: str) -> tuple[Answer, bool]:
        """The next answer, and whether the connection may carry another request."""
        while True:
            while (end := self.buffer.find(b"\r\n\r\n")) < 0:
                if len(self.buffer) > MAX_HEADER:
                    raise Unanswered("protocol", "the answer's headers are too long")
                await self._more(bool(self.buffer))
            head = bytes(self.buffer[:end]).decode("latin-1")
            del self.buffer[:end + 4]
            lines = head.split("\r\n")
            parts = lines[0].split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                raise Unanswered("protocol", f"not an HTTP/1.1 answer: {lines[0][:80]!r}")
            status = int(parts[1])
            if 100 <= status < 200:
                continue  # an interim answer: the real one follows
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, colon, value = line.partition(":")
                if not colon:
                    raise Unanswered("protocol", f"a malformed header: {line[:80]!r}")
                headers[name.strip().lower()] = value.strip()
            keep = parts[0] == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
            if method == "HEAD" or status in (204, 304):
                return Answer(status, b""), keep
            if "chunked" in headers.get("transfer-encoding", "").lower():
                return Answer(status, await self._chunked()), keep
            length = headers.get("content-length")
            if length is not None:
                if not length.isdigit():
                    raise Unanswered("protocol", f"a malformed Content-Length: {length[:40]!r}")
                return Answer(status, await self._take(int(length))), keep
            return Answer(status, await self._rest()), False

    async def _chunked(self) -> bytes:
        body = bytearray()
        while True:
            size_line = (await self._take_line(True)).split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise Unanswered("protocol", f"a malformed chunk size: {size_line[:40]!r}") from None
            if size == 0:
                while await self._take_line(True):  # trailers, up to the empty line
                    pass
                return bytes(body)
            body += await self._take(size)
            if await self._take_line(True):
                raise Unanswered("protocol", "a chunk longer than its size")

    async def _rest(self) -> bytes:
        """A body that ends where the connection does."""
        while not self.ended:
            try:
                await self._more(True)
            except _Closed:
                break
        data = bytes(self.buffer)
        self.buffer.clear()
        return data


class Slots:
    """At most `limit` holders at once (``async with``), the others served in the order they came.

    Not :class:`asyncio.Semaphore`: Python 3.11's looks through every waiter at each acquire, and when a fleet's
    Stacks arrive together hundreds of requests wait for the pool's twenty (3% of the operator's busy time in a
    200-Stack fleet was that look). Here a slot a holder gives back goes straight to the first waiter still waiting.
    """

    def __init__(self, limit: int) -> None:
        self.free = limit
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    async def __aenter__(self) -> None:
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return
        handed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(handed)
        try:
            await handed
        except asyncio.CancelledError:
            if handed.done() and not handed.cancelled():  # given a slot as it was cancelled: pass it on
                self._give_back()
            raise

    async def __aexit__(self, *_: object) -> None:
        self._give_back()

    def _give_back(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():  # a cancelled waiter is passed over
                waiter.set_result(None)
                return
        self.free += 1


class Pool:
    """Keep-alive connections to ``host:port`` (TLS with `tls`), at most `limit` requests at once."""

    def __init__(self, host: str, port: int, tls: ssl.SSLContext | None, *, limit: int) -> None:
        self.host, self.port, self.tls = host, port, tls
        self._slots = Slots(limit)
        self._idle: collections.deque[_Connection] = collections.deque()
        self.opened = 0  # connections made so far
        self.resent = 0  # requests sent again because a kept connection had been closed

    async def request(self, method: str, target: str, head: bytes, body: bytes | None, *,
                      timeout: float) -> Answer:
        """The answer to `method` on `target`; `head` is the header lines (each ending in CRLF) but Host and
        Content-Length."""
        message = b"".join((f"{method} {target} HTTP/1.1\r\nHost: {self._host_header()}\r\n".encode("latin-1"),
                            head, b"Content-Length: %d\r\n\r\n" % len(body) if body is not None else b"\r\n",
                            body or b""))
        try:
            async with asyncio.timeout(timeout):
                async with self._slots:
                    return await self._send(method, message)
        except TimeoutError:
            raise Unanswered("timeout", f"no answer to {method} {target.split('?', 1)[0]} within {timeout:g}s") \
                from None

    async def _send(self, method: str, message: bytes) -> Answer:
        while True:
            connection, kept = self._take()
            if connection is None:
                connection = await self._connect()
            try:
                assert connection.transport is not None
                connection.transport.write(message)
                answer, keep = await connection.answer(method)
            except _Closed as closed:
                connection.close()
                if kept and not closed.received:
                    self.resent += 1
                    continue  # the server had closed this idle connection: a new one
                raise Unanswered("closed", f"the connection closed before the answer ended: {closed}") from None
            except OSError as err:
                connection.close()
                raise Unanswered("io", str(err) or type(err).__name__) from err
            except BaseException:
                connection.close()  # cancelled, or a malformed answer: what is left on it is unknown
                raise
            if keep and connection.usable:
                self._idle.append(connection)
            else:
                connection.close()
            return answer

    def _take(self) -> tuple[_Connection | None, bool]:
        while self._idle:
            connection = self._idle.pop()  # the most recently used: the least likely to have been closed
            if connection.usable:
                return connection, True
            connection.close()
        return None, False

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, connection = await loop.create_connection(
                _Connection, self.host, self.port, ssl=self.tls, server_hostname=self.host if self.tls else None)
        except (OSError, ssl.SSLError) as err:
            raise Unanswered("connect", f"cannot connect to {self.host}:{self.port}: {err}") from err
        self.opened += 1
        return connection

    def _host_header(self) -> str:
        host = self.host if self.host.isascii() else self.host.encode("idna").decode("ascii")
        host = f"[{host}]" if ":" in host else host
        return f"{host}:{self.port}"

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()
