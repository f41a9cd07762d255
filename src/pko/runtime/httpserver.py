"""The operator's HTTP listeners on aiohttp: ``/healthz``, ``/readyz`` and ``/metrics`` here, and the base the
Program file server (:mod:`pko.controllers.program.fileserver`) is built on.

Why aiohttp's low-level server and one handler rather than its router: every answer (404 for an unknown path,
405 for another method, 500 when a route fails) is ours, word for word, as the Go operator's muxes give them, and
a maintained server parses the requests. Every response closes its connection (``Connection: close``): probes and
scrapes are one request each, and a listener then shuts down at once.

It must never serve anything but the routes it is given, and never read request bodies.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping

from aiohttp import web
from multidict import CIMultiDict

log = logging.getLogger(__name__)

Response = tuple[int, str, bytes]
Route = Callable[[], Awaitable[Response]]
Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]

MAX_HEADER_BYTES = 16 * 1024
SHUTDOWN_SECONDS = 2.0


def split_host_port(address: str) -> tuple[str, str]:
    """Go's ``net.SplitHostPort``: ``":9090"`` → ``("", "9090")``, ``"[::1]:80"`` → ``("::1", "80")``."""
    if address.startswith("["):
        close = address.find("]")
        if close < 0 or not address[close + 1:].startswith(":"):
            raise ValueError(f"address {address!r}: missing port in address")
        host, port = address[1:close], address[close + 2:]
    else:
        host, sep, port = address.rpartition(":")
        if not sep:
            raise ValueError(f"address {address!r}: missing port in address")
        if ":" in host:
            raise ValueError(f"address {address!r}: too many colons in address")
    if "[" in port or "]" in port:
        raise ValueError(f"address {address!r}: unexpected bracket")
    return host, port


def join_host_port(host: str, port: str) -> str:
    """Go's ``net.JoinHostPort``: brackets around IPv6 hosts."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_address(listen: str) -> tuple[str | None, int]:
    """Host (``None``: every interface) and port to bind for a Go-style listen address (``":9090"``,
    ``"127.0.0.1:0"``, ``"[::1]:80"``); ``ValueError`` for what Go's ``net.Listen`` would refuse."""
    host, port = split_host_port(listen)
    if not port.isdigit():
        raise ValueError(f"address {listen!r}: invalid port")
    return (host or None), int(port)


def parse_address(address: str) -> tuple[str, int] | None:
    """A probe or metrics bind address: ``":8081"`` → all IPv4 interfaces, ``"127.0.0.1:0"`` → a free port,
    ``"0"`` (or empty) → off, as controller-runtime's ``--health-probe-bind-address``."""
    if address in ("", "0"):
        return None
    host, port = bind_address(address)
    return (host or "0.0.0.0"), port


def response(status: int, headers: Iterable[tuple[str, str]], body: bytes) -> web.Response:
    """A response with exactly these headers (aiohttp adds Content-Length, Date, Server and Connection: close)."""
    answer = web.Response(status=status, body=body, headers=CIMultiDict(headers))
    answer.force_close()
    return answer


class Listener:
    """One handler on one address (``host`` None: every interface), until :meth:`close`."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._runner: web.ServerRunner | None = None

    @property
    def port(self) -> int:
        """The bound port (useful after binding port 0)."""
        if self._runner is None or not self._runner.addresses:
            raise RuntimeError("server is not running")
        return int(self._runner.addresses[0][1])

    async def start(self, host: str | None, port: int) -> None:
        server = web.Server(self._handler, access_log=None, max_line_size=MAX_HEADER_BYTES,
                            max_field_size=MAX_HEADER_BYTES)
        runner = web.ServerRunner(server, shutdown_timeout=SHUTDOWN_SECONDS)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner

    async def close(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()


class Server(Listener):
    """``GET``/``HEAD`` on a fixed set of paths; routes are async callables returning status, type and body."""

    def __init__(self, routes: Mapping[str, Route]) -> None:
        super().__init__(self._handle)
        self.routes = dict(routes)

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            return response(405, [("Content-Type", "text/plain")], b"method not allowed\n")
        route = self.routes.get(request.rel_url.raw_path)
        if route is None:
            return response(404, [("Content-Type", "text/plain")], b"404 page not found\n")
        try:
            status, content_type, body = await route()
        except Exception:
            log.exception("handler for %s failed", request.rel_url.raw_path)
            status, content_type, body = 500, "text/plain", b"internal error\n"
        return response(status, [("Content-Type", content_type)], body)
