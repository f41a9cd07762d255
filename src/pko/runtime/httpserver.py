"""A tiny HTTP/1.1 server on asyncio streams, for ``/healthz``, ``/readyz`` and ``/metrics``.

Probes and Prometheus only ever send small ``GET`` requests, so a web framework would be all weight: this
answers one request per connection and closes it. Handlers are async callables returning status, content type
and body.

It must never serve anything but the routes it is given, and never read request bodies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping

log = logging.getLogger(__name__)

Response = tuple[int, str, bytes]
Route = Callable[[], Awaitable[Response]]

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error",
            503: "Service Unavailable"}
_MAX_HEADER_BYTES = 16 * 1024


def parse_address(address: str) -> tuple[str, int] | None:
    """Go-style bind address: ``":8081"`` → all interfaces, ``"127.0.0.1:0"`` → a free port, ``"0"`` → off."""
    if address in ("", "0"):
        return None
    host, _, port = address.rpartition(":")
    return (host.strip("[]") or "0.0.0.0"), int(port)


def _response(status: int, content_type: str, body: bytes, head: bool = False) -> bytes:
    headers = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return headers.encode("latin-1") + (b"" if head else body)


class Server:
    def __init__(self, routes: Mapping[str, Route]) -> None:
        self.routes = dict(routes)
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The bound port (useful after binding port 0)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("server is not running")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._handle, host, port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
                return
            if len(head) > _MAX_HEADER_BYTES:
                writer.write(_response(400, "text/plain", b"request too large\n"))
                return
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = request_line.split(" ")
            if len(parts) != 3:
                writer.write(_response(400, "text/plain", b"bad request\n"))
                return
            method, target, _ = parts
            path = target.split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                writer.write(_response(405, "text/plain", b"method not allowed\n"))
                return
            route = self.routes.get(path)
            if route is None:
                writer.write(_response(404, "text/plain", b"404 page not found\n", method == "HEAD"))
                return
            try:
                status, content_type, body = await route()
            except Exception:
                log.exception("handler for %s failed", path)
                status, content_type, body = 500, "text/plain", b"internal error\n"
            writer.write(_response(status, content_type, body, method == "HEAD"))
        finally:
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
