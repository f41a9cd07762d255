"""The dependency cache's request handler: answer from the store, or fetch from the upstream once and keep it.

Why one download per key at a time: a fleet's pods start together and ask for the same plugin in the same second;
the first request fetches it and the others wait for that download instead of starting their own. An expired
index (an npm packument, a module's ``@v/list``) is served stale, with ``X-Cache: STALE``, when its upstream
fails, so an upstream outage does not stop pods whose dependencies are already cached.

Answers carry ``X-Cache`` (``HIT``, ``MISS``, ``STALE``) and ``X-Content-Sha256`` (the stored blob's digest).

The one ``POST``, ``/cache/npm-tree``, takes a ``package-lock.json`` and answers the ``node_modules`` tree it
determines (:mod:`pko.depcache.npmtree`), built once per lockfile from the npm part and kept under the sha256 of
its entries: what a pod sends selects a tree, it never becomes one. While a tree is being built, the requests for
it are answered as it is written (:mod:`pko.depcache.growing`; chunked, no ``X-Content-Sha256`` yet), once every
package has been fetched and checked, so a refusal is still a ``422`` before the first byte.

Must never accept another method or path for writing, fetch a URL that is not under a configured upstream, or log
an upstream's credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry

from pko.depcache import growing, npmtree, routes, treebuild
from pko.depcache.store import Entry, Store
from pko.expiring import TTLCache
from pko.runtime import httpserver, metrics

if TYPE_CHECKING:
    from typing_extensions import Buffer

log = logging.getLogger(__name__)

DEFAULT_INDEX_TTL = 300.0
CHUNK = 1 << 16
#: How many package tarballs a tree build fetches from the npm upstream at once.
TREE_FETCHES = 8
#: How many trees are built at once (each takes a worker thread and a CPU); later builds wait.
TREE_BUILDS = 2
#: The largest tree kept, as a share of the cache's budget (a bigger one is refused: the pod installs with npm).
TREE_SHARE = 4
#: Seconds a tree refused for its size is remembered, and how many such refusals are kept. A tree's size is known
#: only once it is built (or its packages' tarballs weighed): without a memory, every pod of a Stack whose tree
#: outgrows the share had the cache fetch, check and write up to a quarter of its budget again at each wake, for
#: the same refusal. A cache given more room is a restart of the operator, which forgets them.
REFUSED_FOR = 3600.0
REFUSALS_KEPT = 1024
_ERROR = (("Content-Type", "text/plain; charset=utf-8"), ("X-Content-Type-Options", "nosniff"))


class UpstreamFailed(Exception):
    """The upstream did not give the file: `status` is what the client gets (its 404, or 502)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class DependencyCache:
    """Serve ``/cache/<part>/...`` from `store`, filling it from `upstreams` (part → URL base). `base` gives the
    cache's own URL as workspaces reach it (npm packuments are rewritten to point there)."""

    def __init__(self, store: Store, upstreams: Mapping[str, str], base: Callable[[], Awaitable[str]], *,
                 index_ttl: float = DEFAULT_INDEX_TTL, registry: CollectorRegistry | None = None,
                 user_agent: str = "pko") -> None:
        self.store = store
        self.upstreams = dict(upstreams)
        self.base = base
        self.index_ttl = index_ttl
        self.user_agent = user_agent
        self.metrics = metrics.DependencyCacheMetrics(registry or CollectorRegistry(), lambda: store.size)
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # the download of a key, and who waits on it
        self._builds = asyncio.Semaphore(TREE_BUILDS)
        self._growing: dict[str, growing.Growing] = {}  # the trees being built, by key
        self._tasks: set[asyncio.Task[None]] = set()
        self._refused_trees: TTLCache[str] = TTLCache(REFUSALS_KEPT)  # refused for their size: answered at once
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, connect=30, sock_read=120),
                headers={"User-Agent": self.user_agent})
        return self._session

    # --- answering ---------------------------------------------------------------------------------------------

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.raw_path == routes.NPM_TREE_PATH and request.method == "POST":
            return await self._tree(request)
        if request.method not in ("GET", "HEAD"):
            return httpserver.response(405, (*_ERROR, ("Allow", "GET, HEAD")), b"method not allowed\n")
        found = routes.lookup(request.raw_path, self.upstreams, request.headers.get("Accept", ""))
        if isinstance(found, routes.Refusal):
            self.metrics.requests.labels("-", "refused").inc()
            return httpserver.response(found.status, _ERROR, f"{found.message}\n".encode())
        try:
            entry, result = await self.entry(found)
        except UpstreamFailed as err:
            self.metrics.requests.labels(found.part, "not_found" if err.status == 404 else "error").inc()
            return httpserver.response(err.status, _ERROR, f"{err}\n".encode())
        self.metrics.requests.labels(found.part, result).inc()
        if request.method == "GET":
            self.metrics.served_bytes.labels(found.part).inc(entry.size)
        return web.FileResponse(self.store.blob(entry), headers={
            "Content-Type": entry.content_type, "X-Cache": result.upper(), "X-Content-Sha256": entry.digest})

    async def entry(self, found: routes.Lookup) -> tuple[Entry, str]:
        """The stored answer to `found` and how it was got (``hit``, ``miss`` or ``stale``)."""
        base = await self._npm_base() if found.rewrite else ""
        entry = self._fresh(found, base)
        if entry is not None:
            return entry, "hit"
        async with self._only_one(found.key):
            entry = self._fresh(found, base)  # another request may have fetched it meanwhile
            if entry is not None:
                return entry, "hit"
            try:
                return await self._fetch(found, base), "miss"
            except UpstreamFailed as err:
                stale = self.store.get(found.key)
                if stale is None or err.status == 404:
                    raise
                log.warning("serving a stale %s index for %s: %s", found.part, found.path, err)
                return stale, "stale"

    @contextlib.asynccontextmanager
    async def _only_one(self, key: str) -> AsyncIterator[None]:
        """Hold the one lock of `key` (a download or a tree build): later requests for it wait for the first."""
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    # --- npm trees ---------------------------------------------------------------------------------------------

    async def _tree(self, request: web.BaseRequest) -> web.StreamResponse:
        """``POST /cache/npm-tree`` with a lockfile: the tree it determines (gzipped tar), or 422 and why not."""
        part = routes.NPM_TREE
        if routes.NPM not in self.upstreams:
            self.metrics.requests.labels(part, "refused").inc()
            return httpserver.response(404, _ERROR, b"the dependency cache has no npm upstream\n")
        body = await _read_body(request, npmtree.MAX_LOCKFILE_BYTES + 1)
        try:
            tree = await asyncio.to_thread(npmtree.plan, body)  # up to 16 MiB of JSON: not on the event loop
            del body
            answer, result = await self.tree_entry(tree)
        except npmtree.Refused as err:
            self.metrics.requests.labels(part, "refused").inc()
            return httpserver.response(422, _ERROR, f"{err}\n".encode())
        except UpstreamFailed as err:
            self.metrics.requests.labels(part, "error").inc()
            return httpserver.response(502, _ERROR, f"{err}\n".encode())
        self.metrics.requests.labels(part, result).inc()
        if isinstance(answer, growing.Reader):
            return await self._stream(request, answer, tree, result)
        self.metrics.served_bytes.labels(part).inc(answer.size)
        return web.FileResponse(self.store.blob(answer), headers={
            "Content-Type": answer.content_type, "X-Cache": result.upper(), "X-Content-Sha256": answer.digest,
            "X-Npm-Tree": tree.key})

    async def tree_entry(self, tree: npmtree.Tree) -> tuple[Entry | growing.Reader, str]:
        """The stored tree of `tree` (``hit``), a reader of it while it is built (``hit`` when another request
        started the build, ``miss`` when this one did)."""
        key = f"{routes.NPM_TREE}/{tree.key}"
        found = self._stored_or_building(key)
        if found is not None:
            return found, "hit"
        if (why := self._refused_trees.get(key)) is not None:
            raise npmtree.Refused(f"{why} (remembered: the tree is not built again for {REFUSED_FOR / 3600:g}h)")
        async with self._only_one(key):
            found = self._stored_or_building(key)  # a request before this one may have started it meanwhile
            if found is not None:
                return found, "hit"
            await self._builds.acquire()
            try:
                return await self._start_tree(key, tree), "miss"
            except BaseException:
                self._builds.release()
                raise

    @property
    def _tree_limit(self) -> int:
        return self.store.max_bytes // TREE_SHARE

    def _stored_or_building(self, key: str) -> Entry | growing.Reader | None:
        entry = self.store.get(key)
        if entry is not None:
            return entry
        building = self._growing.get(key)
        return building.open() if building is not None else None  # opened now, before the build can end

    async def _start_tree(self, key: str, tree: npmtree.Tree) -> growing.Reader:
        """Fetch and check every package of `tree`, then build it in a worker thread: a reader of what it writes.
        Holds a build slot, which the build gives back when it ends."""
        started = time.monotonic()
        gate = asyncio.Semaphore(TREE_FETCHES)

        async def tarball(package: npmtree.Package) -> tuple[str, Entry]:
            found = routes.lookup(f"{routes.PREFIX}{routes.NPM}{package.tarball}", self.upstreams)
            if isinstance(found, routes.Refusal):
                raise npmtree.Refused(f"{package.path}: {found.message}")
            async with gate:
                return package.path, (await self.entry(found))[0]
        got = dict(await asyncio.gather(*(tarball(p) for p in tree.packages)))
        tarballs = {path: self.store.blob(e) for path, e in got.items()}
        if sum(e.size for e in got.values()) > self._tree_limit:  # a tree weighs at least its packages' tarballs
            refused = _too_big(self._tree_limit)
            self._refused_trees.put(key, str(refused), REFUSED_FOR)
            raise refused
        await asyncio.to_thread(treebuild.verify_all, tree, tarballs)
        with contextlib.ExitStack() as stack:
            download = stack.enter_context(self.store.temporary())
            building = growing.Growing(download, asyncio.get_running_loop())
            reader = building.open()
            task = asyncio.create_task(self._build_tree(key, tree, tarballs, building, stack.pop_all(), started))
        self._growing[key] = building
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return reader

    async def _build_tree(self, key: str, tree: npmtree.Tree, tarballs: Mapping[str, Path],
                          building: growing.Growing, cleanup: contextlib.ExitStack, started: float) -> None:
        """Write the tree to `building`'s file, then keep it; every reader gets the end of it, or an error."""
        size = 0
        try:
            def build() -> tuple[treebuild.Written, str, int]:
                with building.path.open("wb", buffering=0) as raw:
                    out = _Hashing(raw, self._tree_limit, building.wrote)
                    written = treebuild.write(tree, tarballs, out)
                    return written, out.digest.hexdigest(), out.size
            written, digest, size = await asyncio.to_thread(build)
            entry = self.store.put(key, building.path, digest, "application/gzip")
        except Exception as err:  # every reader must see the tree cut short, whatever stopped it
            if isinstance(err, _TooBig):
                self._refused_trees.put(key, str(err), REFUSED_FOR)
            building.finish(size, error=f"the npm tree could not be built: {err}")
            log.warning("dependency cache could not build npm tree %s: %s", tree.key[:12], err)
        else:
            building.finish(entry.size)
            log.info("dependency cache built npm tree %s: %d packages, %d files, %d bin links, %d bytes in %.1fs",
                     tree.key[:12], written.packages, written.files, written.links, entry.size,
                     time.monotonic() - started)
        finally:
            # nothing awaited since the rename (or the failure): a later request finds the stored tree, or builds
            self._growing.pop(key, None)
            cleanup.close()
            self._builds.release()

    async def _stream(self, request: web.BaseRequest, reader: growing.Reader, tree: npmtree.Tree,
                      result: str) -> web.StreamResponse:
        """Answer a tree being built as it is written; cut the answer off (no closing chunk) if the build fails."""
        response = web.StreamResponse(headers={
            "Content-Type": "application/gzip", "X-Cache": result.upper(), "X-Npm-Tree": tree.key})
        sent = 0
        try:
            await response.prepare(request)
            async for chunk in reader.chunks():
                await response.write(chunk)
                sent += len(chunk)
        except growing.Aborted as err:
            log.warning("cutting off an npm tree answer after %d bytes: %s", sent, err)
            if request.transport is not None:
                request.transport.abort()
            return response
        except ConnectionError as err:  # the pod went away: the build goes on for the others and the store
            log.info("an npm tree answer ended after %d bytes: the client left (%s)", sent, err)
            return response
        finally:
            reader.close()
            self.metrics.served_bytes.labels(routes.NPM_TREE).inc(sent)
        await response.write_eof()
        return response

    def _fresh(self, found: routes.Lookup, base: str) -> Entry | None:
        entry = self.store.get(found.key)
        if entry is None or entry.base != base:
            return None
        if found.immutable or time.time() - entry.fetched < self.index_ttl:
            return entry
        return None

    async def _npm_base(self) -> str:
        return f"{await self.base()}/{routes.NPM}"

    async def _fetch(self, found: routes.Lookup, base: str) -> Entry:
        """Download `found.url` into the store (rewritten when it is an npm packument)."""
        headers = {"Accept": routes.upstream_accept(found)}
        where = routes.redact(found.url)
        started = time.monotonic()
        with self.store.temporary() as download:
            digest = hashlib.sha256()
            try:
                async with self._client().get(found.url, headers=headers) as answer:
                    if answer.status in (404, 410):
                        raise UpstreamFailed(404, f"{where}: not found upstream ({answer.status})")
                    if answer.status != 200:
                        raise UpstreamFailed(502, f"{where}: the upstream answered {answer.status}")
                    content_type = answer.headers.get("Content-Type", "application/octet-stream")
                    if found.rewrite:  # a packument: rewritten whole, so read whole
                        original = await answer.read()
                    else:  # a file, maybe hundreds of MB: streamed to disk
                        with download.open("wb") as out:
                            async for chunk in answer.content.iter_chunked(CHUNK):
                                out.write(chunk)
                                digest.update(chunk)
            except (TimeoutError, aiohttp.ClientError, OSError) as err:
                raise UpstreamFailed(502, f"{where}: {type(err).__name__}: {err}".rstrip(": ")) from None
            if found.rewrite:
                size = len(original)
                try:
                    body = routes.rewrite_packument(original, self.upstreams[found.part], base)
                except ValueError as err:
                    raise UpstreamFailed(502, f"{where}: not a JSON packument: {err}") from None
                download.write_bytes(body)
                digest = hashlib.sha256(body)
            else:
                size = download.stat().st_size
            self.metrics.upstream_bytes.labels(found.part).inc(size)
            entry = self.store.put(found.key, download, digest.hexdigest(), content_type, base=base)
        log.info("dependency cache fetched %s (%d bytes in %.1fs)", where, size, time.monotonic() - started)
        return entry


async def _read_body(request: web.BaseRequest, limit: int) -> bytes:
    """The request body up to `limit` bytes, however it arrives (one ``read`` returns what has come so far)."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = await request.content.read(min(CHUNK, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


class _TooBig(npmtree.Refused):
    """A tree over the share of the cache a tree may take: remembered for :data:`REFUSED_FOR`."""


def _too_big(limit: int) -> _TooBig:
    return _TooBig(f"the tree is over {limit} bytes (a quarter of the dependency cache's size)")


class _Hashing(io.BufferedIOBase):
    """A binary file that hashes what is written to it (the tree's digest without reading it back) and refuses to
    grow past `limit` bytes."""

    def __init__(self, raw: BinaryIO, limit: int, wrote: Callable[[int], None] = lambda size: None) -> None:
        super().__init__()
        self.raw = raw
        self.limit = limit
        self.wrote = wrote  # told the size after each write
        self.size = 0
        self.digest = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: Buffer) -> int:
        chunk = bytes(data)
        self.size += len(chunk)
        if self.size > self.limit:
            raise _too_big(self.limit)
        self.digest.update(chunk)
        view = memoryview(chunk)
        while view:  # the raw file may take less than all of it
            view = view[self.raw.write(view):]
        self.wrote(self.size)
        return len(chunk)

    def flush(self) -> None:
        self.raw.flush()
