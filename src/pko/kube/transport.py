"""The HTTP side of the API client: connections to one API server, with the kubeconfig's TLS and credentials, the
client-side rate limiter and the User-Agent. Bytes in, bytes out. Short requests go over the keep-alive pool of
:mod:`pko.kube.http1`; watches, and every request when a proxy is configured, over an aiohttp session.

Why not lightkube's own HTTP client: at fleet scale the operator's CPU follows its request count (some 30 requests
a Stack, docs/performance.md), and httpx2's pure-Python HTTP/1.1 stack cost about four times what aiohttp's C
parser does for the same request (1.4 ms against 0.33 ms of the client's CPU for a GET of a small object from a
loopback server); aiohttp's request machinery in turn cost about twice what http1's does (0.41 against 0.19 ms,
``python -m bench.requestcost``). lightkube still reads the kubeconfig (in-cluster, exec plugins, certificates) and
serves the rare calls that need its models (pod logs, TokenRequest).

Errors: an answer that is not 2xx becomes a :class:`pko.kube.errors.ApiError` from its ``Status`` (or from the
text of a non-JSON body); no answer at all (refused, reset, timed out), from either path, becomes the httpx2
``TransportError`` of the same meaning, which the rest of pko catches as :data:`pko.kube.errors.TransportError`.

This module must never cache, retry (but for one new credential after a 401) or interpret objects.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import os
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp
import httpx2
import msgspec
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import User
from lightkube.core.exceptions import ConfigError

from pko.kube import errors, http1, ratelimit

TOKEN_FILE_MAX_AGE = 60.0
"""Seconds a token file's content is trusted before it is read again (client-go re-reads a projected token this
often: the kubelet rotates it in place)."""

MAX_CONNECTIONS = 20
"""Short requests in flight at once (more wait for a connection). Why so few: each TLS connection of asyncio holds a
256 KiB buffer, some 0.3 MB of RSS a connection, and a burst of a fleet's writes opened a hundred (31 MB more than
httpx2's pool); twenty requests at once already outrun the API rate a fleet's operator is given. Watches have
connections of their own, as many as there are watches."""

_EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1alpha1", "client.authentication.k8s.io/v1beta1",
                      "client.authentication.k8s.io/v1")

Params = Mapping[str, str | int | None]


class Credentials:
    """The ``Authorization`` header a kubeconfig user presents (None for a client certificate or no user)."""

    def __init__(self, user: User | None, *, clock: Any = time.monotonic) -> None:
        self.user = user
        self._clock = clock
        self._header: str | None = None
        self._read_at = 0.0
        self._expires: float | None = None
        self._lock = asyncio.Lock()
        if user is not None and user.auth_provider and not (user.token or user.token_file or user.exec):
            raise ConfigError("auth-provider not supported")

    async def header(self) -> str | None:
        user = self.user
        if user is None:
            return None
        if user.token_file is not None:
            if self._header is None or self._clock() - self._read_at > TOKEN_FILE_MAX_AGE:
                self._header = f"Bearer {_read_token(user.token_file)}"
                self._read_at = self._clock()
            return self._header
        if user.token is not None:
            return f"Bearer {user.token}"
        if user.exec is not None:
            if self._header is None or (self._expires is not None and self._clock() >= self._expires):
                async with self._lock:
                    if self._header is None or (self._expires is not None and self._clock() >= self._expires):
                        await self._run_exec(user)
            return self._header
        if user.username and user.password:
            pair = base64.b64encode(f"{user.username}:{user.password}".encode()).decode()
            return f"Basic {pair}"
        return None

    def rejected(self) -> bool:
        """The API server answered 401: forget a credential that may have been rotated or expired. True when asking
        again may help (a token file or an exec plugin), so the request is worth sending once more."""
        user = self.user
        if user is None or not (user.token_file or user.exec):
            return False
        self._header = None
        return True

    async def _run_exec(self, user: User) -> None:
        plugin = user.exec
        assert plugin is not None
        if plugin.apiVersion not in _EXEC_API_VERSIONS:
            raise ConfigError(f"auth exec api version {plugin.apiVersion} not implemented")
        env = dict(os.environ)
        env.update((var.name, var.value) for var in plugin.env or [])
        proc = await asyncio.create_subprocess_exec(plugin.command, *(plugin.args or []), env=env,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        if proc.returncode != 0:
            raise ConfigError(f"exec {plugin.command} returned {proc.returncode}: {err.decode(errors='replace')}")
        status = json.loads(out).get("status") or {}
        token = status.get("token")
        if not token:
            raise ConfigError(f"exec {plugin.command} returned no token")
        self._header = f"Bearer {token}"
        self._expires = None
        expiry = status.get("expirationTimestamp")
        if expiry:
            with contextlib.suppress(ValueError):
                left = (datetime.fromisoformat(expiry.replace("Z", "+00:00")) - datetime.now(UTC)).total_seconds()
                self._expires = self._clock() + max(0.0, left - 10)


def _read_token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except FileNotFoundError as err:
        raise ConfigError(f"Token file {path} not found") from err


class Transport:
    """Requests to the API server of `config`. The session opens on the first request (in the running loop)."""

    def __init__(self, config: SingleConfig, *, timeout: float = 30.0,
                 limiter: ratelimit.TokenBucket | None = None, user_agent: str | None = None,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.base = config.cluster.server.rstrip("/")
        self.timeout = timeout
        self.limiter = limiter if limiter is not None and limiter.limited else None
        self.credentials = Credentials(config.user)
        self._ssl = (client_adapter.verify_cluster(config.cluster, config.user or User(), config.abs_file)
                     if self.base.startswith("https:") else None)
        self._headers = {"Accept": "application/json"}
        if user_agent:  # who sent a request, in the API server's audit log (the operator names its shard there)
            self._headers["User-Agent"] = user_agent
        self._max_connections = max_connections
        self._proxy = proxy_for(self.base)
        server = urllib.parse.urlsplit(self.base)
        self._prefix = server.path  # a server URL may have a path of its own (a proxy in front of the cluster)
        self._address = (server.hostname or "", server.port or (443 if server.scheme == "https" else 80))
        self._head = "".join(f"{name}: {value}\r\n" for name, value in self._headers.items())
        self._pool: http1.Pool | None = None  # short requests, unless through a proxy (http1.py)
        self._session: aiohttp.ClientSession | None = None
        self._streams: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stream_timeout = aiohttp.ClientTimeout(total=None, connect=timeout, sock_connect=timeout,
                                                     sock_read=None)

    def _open(self, *, stream: bool = False) -> aiohttp.ClientSession:
        """The session for short requests (at most `max_connections` at once), or for watches (`stream`: one
        connection each, never waiting for a short request's connection, nor holding one)."""
        self._in_running_loop()
        session = self._streams if stream else self._session
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else True,
                                             limit=0 if stream else self._max_connections)
            session = aiohttp.ClientSession(connector=connector, headers=self._headers, proxy=self._proxy,
                                            timeout=self._stream_timeout if stream
                                            else aiohttp.ClientTimeout(total=self.timeout))
            if stream:
                self._streams = session
            else:
                self._session = session
        return session

    def _in_running_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # Sessions and connections belong to the loop they were opened in; a client reused under another loop
            # (a test's fixture, a CLI command's second asyncio.run) opens its own there.
            self._loop, self._session, self._streams, self._pool = loop, None, None, None

    def _short(self) -> http1.Pool:
        """The pool of connections for short requests in the running loop."""
        self._in_running_loop()
        if self._pool is None:
            self._pool = http1.Pool(*self._address, self._ssl, limit=self._max_connections)
        return self._pool

    async def close(self) -> None:
        if self._loop is asyncio.get_running_loop():
            for session in (self._session, self._streams):
                if session is not None:
                    await session.close()
            if self._pool is not None:
                self._pool.close()
        self._session = self._streams = self._pool = None

    async def _request_headers(self, content_type: str | None) -> dict[str, str]:
        headers: dict[str, str] = {}
        auth = await self.credentials.header()
        if auth is not None:
            headers["Authorization"] = auth
        if content_type is not None:
            headers["Content-Type"] = content_type
        return headers

    async def request(self, method: str, path: str, *, params: Params | None = None, body: bytes | None = None,
                      content_type: str | None = None) -> bytes:
        """The body of the answer to one request; :class:`errors.ApiError` for a failure status."""
        if self._proxy is None:
            return await self._request_short(method, path, params, body, content_type)
        response = await self._send(method, path, params, body, content_type, stream=False)
        try:
            return await response.read()
        except (aiohttp.ClientError, TimeoutError) as err:
            raise transport_error(err) from err
        finally:
            response.release()

    @contextlib.asynccontextmanager
    async def stream(self, path: str, *, params: Params | None = None) -> AsyncIterator[AsyncIterator[bytes]]:
        """The body of a long answer (a watch) as it arrives, with no read timeout."""
        response = await self._send("GET", path, params, None, None, stream=True)
        try:
            yield _chunks(response)
        finally:
            response.close()  # a watch left mid-stream must not hand its connection to another request

    async def _send(self, method: str, path: str, params: Params | None, body: bytes | None,
                    content_type: str | None, *, stream: bool) -> aiohttp.ClientResponse:
        """The response to one request, its body not read yet: sent again once with fresh credentials when the
        first is refused with 401 (a rotated token); :class:`errors.ApiError` for any other failure status."""
        query = _query(params)
        for attempt in (1, 2):
            headers = await self._request_headers(content_type)
            if self.limiter is not None:
                await self.limiter.acquire()
            try:
                response = await self._open(stream=stream).request(method, self.base + path, params=query,
                                                                   data=body, headers=headers)
                if response.status < 400:
                    return response
                try:
                    data = await response.read()
                except BaseException:
                    response.close()
                    raise
                response.release()  # read whole: its connection serves the next request
            except (aiohttp.ClientError, TimeoutError) as err:
                raise transport_error(err) from err
            if response.status == 401 and attempt == 1 and self.credentials.rejected():
                continue
            raise api_error(response.status, data)
        raise AssertionError("unreachable")


    async def _request_short(self, method: str, path: str, params: Params | None, body: bytes | None,
                             content_type: str | None) -> bytes:
        """:meth:`request` on the pool of :mod:`pko.kube.http1`, sent again once with fresh credentials when the
        first is refused with 401."""
        target = self._prefix + path + _query_string(params)
        for attempt in (1, 2):
            headers = await self._request_headers(content_type)
            if any("\r" in value or "\n" in value for value in headers.values()):
                # a credential with a line break in it would end the headers early (aiohttp refuses such values too)
                raise ConfigError("a request header (the credential?) holds a line break")
            head = (self._head + "".join(f"{name}: {value}\r\n" for name, value in headers.items())).encode("latin-1")
            if self.limiter is not None:
                await self.limiter.acquire()
            try:
                answer = await self._short().request(method, target, head, body, timeout=self.timeout)
            except http1.Unanswered as err:
                raise unanswered_error(err) from err
            if answer.status < 400:
                return answer.body
            if answer.status == 401 and attempt == 1 and self.credentials.rejected():
                continue
            raise api_error(answer.status, answer.body)
        raise AssertionError("unreachable")


async def _chunks(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    try:
        async for chunk in response.content.iter_any():
            yield chunk
    except (aiohttp.ClientError, TimeoutError) as err:
        raise transport_error(err) from err


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for `url` (``HTTPS_PROXY``, ``HTTP_PROXY``, except what ``NO_PROXY``
    names), looked up once: aiohttp's ``trust_env`` looks again in a thread for every request."""
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def _query(params: Params | None) -> dict[str, str] | None:
    if not params:
        return None
    return {k: str(v) for k, v in params.items() if v is not None}


def _query_string(params: Params | None) -> str:
    """``?a=1&b=x%2Fy`` for `params` (empty for none). A controller sends the same few queries again and again
    (``fieldManager`` and ``force`` of every apply, the label selectors of its lists): encoding each anew was 1.7% of
    the operator's CPU in a fleet of 200 (``urlencode`` quotes every key and value)."""
    return _encoded(tuple(params.items())) if params else ""


@functools.lru_cache(maxsize=512)
def _encoded(items: tuple[tuple[str, str | int | None], ...]) -> str:
    query = _query(dict(items))
    return "?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote) if query else ""


def api_error(status: int, body: bytes) -> errors.ApiError:
    """The error for a failure answer: its ``Status`` when the body is one, else its text."""
    try:
        decoded = msgspec.json.decode(body)
    except msgspec.DecodeError:
        decoded = None
    if isinstance(decoded, dict) and decoded.get("kind") == "Status":
        details = decoded.get("details")
        return errors.from_status(int(decoded.get("code") or status), str(decoded.get("reason") or ""),
                                  str(decoded.get("message") or ""), details if isinstance(details, dict) else None)
    return errors.from_status(status, message=body.decode(errors="replace").strip())


_UNANSWERED: dict[str, type[httpx2.TransportError]] = {
    "connect": httpx2.ConnectError, "timeout": httpx2.ReadTimeout, "closed": httpx2.RemoteProtocolError,
    "protocol": httpx2.RemoteProtocolError, "io": httpx2.ReadError}


def unanswered_error(err: http1.Unanswered) -> httpx2.TransportError:
    """A short request's failure to get an answer, as :func:`transport_error` names aiohttp's."""
    return _UNANSWERED.get(err.reason, httpx2.TransportError)(str(err) or err.reason)


def transport_error(err: BaseException) -> httpx2.TransportError:
    """No answer from the API server, as the httpx2 error of the same meaning (what ``errors.TransportError``
    names for every caller)."""
    message = str(err) or type(err).__name__
    if isinstance(err, aiohttp.ClientConnectorError):
        return httpx2.ConnectError(message)
    if isinstance(err, (TimeoutError, aiohttp.ServerTimeoutError)):
        return httpx2.ReadTimeout(message)
    if isinstance(err, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)):
        return httpx2.RemoteProtocolError(message)
    if isinstance(err, aiohttp.ClientOSError):
        return httpx2.ReadError(message)
    return httpx2.TransportError(message)
