"""The program file server: an HTTP listener on ``--program-fs-addr`` that serves Program archives.

Why its own listener: workspaces (the agent's ``init --flux-url``) download from it on whatever replica the
advertised address names, so it runs on every replica, leader or not, and must answer without the controllers.
It is a :class:`pko.runtime.httpserver.Listener` (aiohttp) with one handler: what to answer is decided by
:mod:`pko.controllers.program.serving`; reading the Program is the caller's ``lookup`` (the informer cache, with
the API server as fallback).

pko: the same listener serves the dependency cache (:mod:`pko.depcache`) under ``/cache/`` when the operator has
one, since workspaces already reach this address.

It must never read request bodies (but the cache's lockfile, bounded), serve anything outside ``/programs/`` (and
``/cache/`` when there is a cache), or write to the API server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from pko.controllers.program import address, serving
from pko.depcache import routes as cache_routes
from pko.depcache.server import DependencyCache
from pko.runtime import httpserver

log = logging.getLogger(__name__)

Lookup = Callable[[serving.ProgramRef], Awaitable[dict[str, Any] | None]]
"""``lookup(ref)``: the Program ``ref`` names as it is now (at any generation), or ``None``."""

METHOD_NOT_ALLOWED = serving.Reply(405, (*serving.ERROR_HEADERS, ("Allow", "GET, HEAD")), b"method not allowed\n")


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
        self._bind = httpserver.bind_address(listen)
        self._explicit = advertised
        self._env = env
        self._hostname = hostname
        self._listener = httpserver.Listener(self._handle)
        self.cache: DependencyCache | None = None  # pko: the dependency cache served under /cache/, if any
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
        return self._listener.port

    async def start(self) -> None:
        host, port = self._bind
        await self._listener.start(host, port)
        if not self._known.is_set():
            listen_host, _ = httpserver.split_host_port(self.listen)
            self._set_advertised(httpserver.join_host_port(listen_host, str(self.port)))
        log.info("program file server listening on %s (advertised as %s)", self.listen, self._advertised)

    async def close(self) -> None:
        await self._listener.close()
        if self.cache is not None:
            await self.cache.close()

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

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if self.cache is not None and request.raw_path.startswith(cache_routes.PREFIX):
            try:
                return await self.cache.handle(request)
            except Exception as err:  # a failing disk must not take the listener down
                log.exception("dependency cache: serving %s failed", request.raw_path)
                return httpserver.response(500, serving.ERROR_HEADERS, f"{err}\n".encode())
        if request.method not in ("GET", "HEAD"):
            reply = METHOD_NOT_ALLOWED
        else:
            try:
                reply = await self.respond(request.raw_path)
            except Exception as err:  # the API server failing must not take the listener down
                log.exception("serving %s failed", request.raw_path)
                reply = serving.error(500, str(err))
        return httpserver.response(reply.status, reply.headers, reply.body)
