"""The program file server: an HTTP/1.1 listener on ``--program-fs-addr`` that serves Program archives.

Why its own listener: workspaces (the agent's ``init --flux-url``) download from it on whatever replica the
advertised address names, so it runs on every replica, leader or not, and must answer without the controllers.
Requests are small ``GET``s from one client library, so this reads one request head per connection, answers and
closes — no framework. What to answer is decided by :mod:`pko.controllers.program.serving`; reading the Program is
the caller's ``lookup`` (the informer cache, with the API server as fallback).

It must never read request bodies, serve anything outside ``/programs/``, or write to the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pko.controllers.program import address, serving

log = logging.getLogger(__name__)

Lookup = Callable[[serving.ProgramRef], Awaitable[dict[str, Any] | None]]
"""``lookup(ref)``: the Program ``ref`` names as it is now (at any generation), or ``None``."""

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           431: "Request Header Fields Too Large", 500: "Internal Server Error"}
MAX_HEAD_BYTES = 16 * 1024
READ_TIMEOUT = 30.0


def encode(reply: serving.Reply, *, head_only: bool = False) -> bytes:
    """The HTTP/1.1 response bytes of a reply (``Connection: close``)."""
    lines = [f"HTTP/1.1 {reply.status} {REASONS.get(reply.status, 'Unknown')}"]
    lines += [f"{name}: {value}" for name, value in reply.headers]
    lines += [f"Content-Length: {len(reply.body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + (b"" if head_only else reply.body)


class FileServer:
    """Serve Program archives. ``listen`` is Go-style (``":9090"``, ``"127.0.0.1:0"``); ``advertised`` is the
    address for ``status.artifact.url`` — ``None`` derives it from ``listen`` as the Go operator does (with the
    bound port when ``listen`` asks for port 0)."""

    def __init__(
        self,
        lookup: Lookup,
        *,
        listen: str,
        advertised: str | None,
        env: dict[str, str],
        hostname: Callable[[], str],
    ) -> None:
        self.lookup = lookup
        self.listen = listen
        self._bind = address.bind_address(listen)
        self._explicit = advertised
        self._env = env
        self._hostname = hostname
        self._server: asyncio.Server | None = None
        self._advertised: str | None = None
        self._known = asyncio.Event()
        if advertised or env.get(address.ENV_ADVERTISED) or self._bind[1] != 0:
            self._set_advertised(listen)

    def _set_advertised(self, listen: str) -> None:
        self._advertised = address.advertised_address(listen, self._explicit, self._env, self._hostname)
        self._known.set()

    async def advertised(self) -> str:
        """The advertised address (waits for the socket to be bound when the port is chosen at bind time)."""
        await self._known.wait()
        assert self._advertised is not None
        return self._advertised

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("file server is not running")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        host, port = self._bind
        self._server = await asyncio.start_server(self._handle, host, port, limit=MAX_HEAD_BYTES)
        if not self._known.is_set():
            listen_host, _ = address.split_host_port(self.listen)
            self._set_advertised(address.join_host_port(listen_host, str(self.port)))
        log.info("program file server listening on %s (advertised as %s)", self.listen, self._advertised)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def run(self) -> None:
        """Serve until cancelled."""
        await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.shield(self.close())

    async def respond(self, target: str) -> serving.Reply:
        """The reply to ``GET target``."""
        ref = serving.parse(target)
        if isinstance(ref, serving.Reply):
            return ref
        return serving.reply(ref, await self.lookup(ref))

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=READ_TIMEOUT)
            except asyncio.LimitOverrunError:
                writer.write(encode(serving.error(431, "request header too large")))
                return
            except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
                return
            parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            if len(parts) != 3:
                writer.write(encode(serving.error(400, "bad request")))
                return
            method, target, _ = parts
            if method not in ("GET", "HEAD"):
                writer.write(encode(serving.Reply(405, (*serving.ERROR_HEADERS, ("Allow", "GET, HEAD")),
                                                  b"method not allowed\n")))
                return
            try:
                reply = await self.respond(target)
            except Exception as err:  # the API server failing must not take the listener down
                log.exception("serving %s failed", target)
                reply = serving.error(500, str(err))
            writer.write(encode(reply, head_only=method == "HEAD"))
        finally:
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
