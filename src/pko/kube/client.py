"""The async API client every pko component uses: plain dicts in and out (or, for a read, the typed model from
``pko.api`` the caller names), our errors, server-side apply first.

A thin layer over lightkube's ``AsyncClient``. It adds what the operator needs on every call and lightkube leaves
to the caller: kinds from :mod:`pko.kube.resources` (so CRDs and built-ins look alike), the operator's field
manager and forced ownership for server-side apply (the Go operator applies all status with ``ForceOwnership``),
watch bookmarks, "all namespaces" as the default for list and watch, and :mod:`pko.kube.errors` exceptions.

This module must never cache, retry or interpret objects: caching and retrying belong to ``pko.runtime``,
interpreting to the controllers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping
from typing import Any, Literal, TypeVar

import httpx2
import lightkube
import msgspec
from lightkube.core import generic_client
from lightkube.types import CascadeType, PatchType

from pko.api import meta
from pko.kube import errors, objects, ratelimit, resources

FIELD_MANAGER = "pulumi-kubernetes-operator"
"""The field manager of the Go operator; status writers append ``/<controller>-status`` to it."""

PatchKind = Literal["merge", "json", "strategic"]
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._:@-]*[A-Za-z0-9])?$")


def plausible_name(name: str) -> bool:
    """Whether `name` could name an object (at most 253 letters, digits and ``-._:@``, alphanumeric at both ends).

    Why: names come from users' references (a Stack's ``programRef``, a Secret ref); one with a control character,
    a ``/`` or ``..`` would break or change the request URL. No object can have such a name, so a get of it is
    simply not found, and the callers' not-found handling gives the user a precise condition."""
    return len(name) <= 253 and bool(_NAME.match(name))


_PATCH_TYPES = {"merge": PatchType.MERGE, "json": PatchType.JSON, "strategic": PatchType.STRATEGIC}
_CASCADE = {"Background": CascadeType.BACKGROUND, "Foreground": CascadeType.FOREGROUND, "Orphan": CascadeType.ORPHAN}

KindRef = resources.Kind | str
Model = TypeVar("Model", bound=meta.Wire)


@dataclasses.dataclass(frozen=True)
class ObjectList:
    """The result of a list: the items and the collection's resourceVersion (where a watch continues)."""

    items: list[objects.Object]
    resource_version: str


@dataclasses.dataclass(frozen=True)
class WatchEvent:
    """One watch event. ``type`` is ``ADDED``, ``MODIFIED``, ``DELETED`` or ``BOOKMARK``."""

    type: str
    object: objects.Object

    @property
    def resource_version(self) -> str:
        return objects.resource_version_of(self.object)


def label_selector(labels: Mapping[str, str] | None) -> str | None:
    """``{"a": "b"}`` → ``"a=b"``: equality selectors, the only kind the operator uses."""
    if not labels:
        return None
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except lightkube.ApiError as err:
        raise errors.translate(err) from err
    except httpx2.HTTPStatusError as err:  # a non-JSON error body, e.g. "404 page not found" for an unserved kind
        raise errors.from_status(err.response.status_code, message=err.response.text.strip()) from err


class Client:
    """Async access to the API server. Build it from a lightkube ``AsyncClient``; close that client yourself,
    or use :meth:`connect` / ``async with`` to let this one own it."""

    def __init__(self, api: lightkube.AsyncClient, *, field_manager: str = FIELD_MANAGER) -> None:
        self.api = api
        self.field_manager = field_manager
        self._owned = False
        self.limiter: ratelimit.TokenBucket | None = None

    @classmethod
    def connect(
        cls,
        config: lightkube.KubeConfig | Any | None = None,
        *,
        timeout: float = 30.0,
        field_manager: str = FIELD_MANAGER,
        limiter: ratelimit.TokenBucket | None = None,
        user_agent: str | None = None,
    ) -> Client:
        """A client that owns its connection pool. ``config`` is a lightkube ``KubeConfig`` or ``SingleConfig``;
        ``None`` means in-cluster or ``$KUBECONFIG`` (lightkube's rules). ``timeout`` is ``--kube-api-timeout``;
        `limiter` (``--kube-api-qps``/``--kube-api-burst``) bounds the request rate: every HTTP request this client
        sends (each page of a list, each watch (re)connection) waits for a token first."""
        client = cls(lightkube.AsyncClient(config=config, timeout=httpx2.Timeout(timeout)), field_manager=field_manager)
        client._owned = True
        if user_agent:  # who sent a request, in the API server's audit log (the operator names its shard there)
            client.api._client._client.headers["User-Agent"] = user_agent
        if limiter is not None and limiter.limited:
            client.limiter = limiter

            async def admit(_request: Any) -> None:
                await limiter.acquire()

            client.api._client._client.event_hooks["request"].append(admit)
        return client

    @classmethod
    def from_kubeconfig(
        cls,
        kubeconfig: str | os.PathLike[str] | None = None,
        *,
        context: str | None = None,
        timeout: float = 30.0,
        field_manager: str = FIELD_MANAGER,
        limiter: ratelimit.TokenBucket | None = None,
        user_agent: str | None = None,
    ) -> Client:
        """A client for the cluster of a kubeconfig file (its current context, or `context`); without a file, the
        in-cluster config, else ``$KUBECONFIG`` (lightkube's rules)."""
        config = lightkube.KubeConfig.from_file(kubeconfig) if kubeconfig else lightkube.KubeConfig.from_env()
        return cls.connect(config.get(context_name=context) if context else config, timeout=timeout,
                           field_manager=field_manager, limiter=limiter, user_agent=user_agent)

    async def close(self) -> None:
        if self._owned:
            await self.api.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *args: object) -> None:
        await self.close()

    # --- reading ---------------------------------------------------------------------------------------------

    async def get(self, kind: KindRef, name: str, namespace: str | None = None) -> objects.Object:
        """The object, or :class:`pko.kube.errors.NotFound` (also for a name no object can have: see
        :func:`plausible_name`)."""
        k = resources.resource(kind)
        if not plausible_name(name) or (namespace and not plausible_name(namespace)):
            raise errors.NotFound(404, "NotFound",
                                  f"{k.plural} {name!r} not found: not a valid object name" if not plausible_name(name)
                                  else f"namespace {namespace!r} not found: not a valid name")
        with _translated():
            obj = await self.api.get(resources.model(k), name, namespace=_namespace(k, namespace))
        return dict(obj)

    async def get_or_none(self, kind: KindRef, name: str, namespace: str | None = None) -> objects.Object | None:
        try:
            return await self.get(kind, name, namespace)
        except errors.NotFound:
            return None

    async def get_typed_or_none(self, kind: KindRef, model: type[Model], name: str,
                                namespace: str | None = None) -> Model | None:
        """The object as `model` (its ``pko.api`` model), or None: for a reconciler that works on the model only."""
        found = await self.get_or_none(kind, name, namespace)
        return None if found is None else model.model_validate(found)

    async def list(
        self,
        kind: KindRef,
        namespace: str | None = None,
        *,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
        chunk_size: int | None = 500,
        selector: str | None = None,
    ) -> ObjectList:
        """All objects of ``kind`` (in ``namespace``; ``None`` = every namespace), read in chunks. ``selector`` is a
        label selector as a user types it (``env in (a,b),!x``); the API server parses it and refuses a bad one
        (:class:`errors.BadRequest`, with its own message)."""
        k = resources.resource(kind)
        params = {
            "limit": chunk_size,
            "labelSelector": ",".join(s for s in (label_selector(labels), selector) if s) or None,
            "fieldSelector": label_selector(fields),
        }
        br = self.api._client.prepare_request("list", res=resources.model(k), namespace=_scope(k, namespace),
                                              params=params)
        listing = self.api._client.list(br)
        items: list[objects.Object] = []
        with _translated():
            async for obj in listing:
                items.append(dict(obj))
            # An empty list of a fresh kind still carries the collection's resourceVersion.
            resource_version = listing._resourceVersion or ""
        return ObjectList(items, resource_version)

    async def watch(
        self,
        kind: KindRef,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        labels: Mapping[str, str] | None = None,
        timeout_seconds: int | None = None,
        bookmarks: bool = True,
        selector: str | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Watch events from ``resource_version`` on. The stream reconnects by itself when the server ends it
        (after ``timeout_seconds``), continuing from the last event seen; it raises :class:`errors.Gone` when
        that version is too old, and passes any other error on. Stop it by breaking out of the loop. ``selector``
        is a label selector as :meth:`list` takes it (an object relabelled out of it arrives as ``DELETED``)."""
        k = resources.resource(kind)
        params = {
            "timeoutSeconds": timeout_seconds,
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true" if bookmarks else None,
            "labelSelector": ",".join(s for s in (label_selector(labels), selector) if s) or None,
        }
        br = self.api._client.prepare_request("list", res=resources.model(k), namespace=_scope(k, namespace),
                                              watch=True, params=params)
        stream = self._watch_events(br)
        try:
            with _translated():
                async for event_type, obj in stream:
                    yield WatchEvent(str(event_type), dict(obj))
        finally:
            await stream.aclose()

    async def _watch_events(self, br: generic_client.BasicRequest) -> AsyncGenerator[tuple[str, Any], None]:
        """lightkube's watch loop (reconnect from the last version seen when the server ends the stream; any error
        raised) reading events split at newlines only. Why: lightkube reads a watch with httpx's ``aiter_lines``,
        which splits as ``str.splitlines`` does, also at NEL (U+0085), a character the API server's JSON carries
        unescaped; one object with a NEL in any string made every list-and-watch of its kind fail for good
        ("Input data was truncated"), so the operator saw no change of any object of that kind (found by
        tests/chaos/hostile/test_fuzzed_workspaces.py)."""
        client: Any = self.api._client  # lightkube's internals are untyped
        driver: Any = generic_client.WatchDriver(br, client._client.build_request)
        while True:
            response = await client.send(driver.get_request(timeout=client._watch_timeout), stream=True)
            try:
                if response.is_error:
                    await response.aread()  # the error's Status, for errors.ApiError
                response.raise_for_status()
                async for line in json_lines(response.aiter_bytes()):
                    event_type, obj = driver.process_one_line(line)
                    yield str(event_type), obj
            finally:
                await response.aclose()

    async def log(self, name: str, namespace: str, *, container: str | None = None, follow: bool = False,
                  tail_lines: int | None = None, since_seconds: int | None = None) -> AsyncIterator[str]:
        """A pod's log (pods/log), line by line with the newline (the last `since_seconds` only, when given); with
        ``follow`` until the container stops or the caller breaks out. :class:`errors.NotFound` (or BadRequest,
        before the container started) otherwise."""
        with _translated():
            async for line in self.api.log(name, namespace=namespace, container=container, follow=follow,
                                           tail_lines=tail_lines, since=since_seconds):
                yield line

    # --- writing ---------------------------------------------------------------------------------------------

    async def create(self, obj: objects.Object) -> objects.Object:
        k = resources.of(obj)
        _namespace_of(k, obj)
        with _translated():
            created = await self.api.create(resources.model(k)(obj), field_manager=self.field_manager)
        return dict(created)

    async def replace(self, obj: objects.Object) -> objects.Object:
        """PUT the whole object; with ``metadata.resourceVersion`` set this fails with :class:`errors.Conflict`
        when someone else changed it first (optimistic concurrency)."""
        k = resources.of(obj)
        _namespace_of(k, obj)
        with _translated():
            replaced = await self.api.replace(resources.model(k)(obj), field_manager=self.field_manager)
        return dict(replaced)

    async def replace_status(self, obj: objects.Object) -> objects.Object:
        """PUT the status subresource (optimistic concurrency as :meth:`replace`)."""
        k = resources.of(obj)
        model = resources.model(k)
        with _translated():
            replaced = await self.api.replace(model.Status(obj), objects.name_of(obj),
                                              namespace=_namespace_of(k, obj), field_manager=self.field_manager)
        return dict(replaced)

    async def apply(
        self, obj: objects.Object, *, field_manager: str | None = None, force: bool = True
    ) -> objects.Object:
        """Server-side apply ``obj`` (which states only the fields this manager owns)."""
        return await self._apply(obj, status=False, field_manager=field_manager, force=force)

    async def apply_status(
        self, obj: objects.Object, *, field_manager: str | None = None, force: bool = True
    ) -> objects.Object:
        """Server-side apply to the status subresource: ``obj`` carries apiVersion, kind, metadata and status."""
        return await self._apply(obj, status=True, field_manager=field_manager, force=force)

    async def _apply(
        self, obj: objects.Object, *, status: bool, field_manager: str | None, force: bool
    ) -> objects.Object:
        k = resources.of(obj)
        model = resources.model(k)
        with _translated():
            applied = await self.api.patch(
                model.Status if status else model,
                objects.name_of(obj),
                apply_body(obj),
                namespace=_namespace_of(k, obj),
                patch_type=PatchType.APPLY,
                field_manager=field_manager or self.field_manager,
                force=force,
            )
        return dict(applied)

    async def patch(
        self,
        kind: KindRef,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchKind = "merge",
        status: bool = False,
    ) -> objects.Object:
        """A JSON merge patch (default), JSON patch or strategic merge patch (built-in kinds only)."""
        k = resources.resource(kind)
        model = resources.model(k)
        with _translated():
            patched = await self.api.patch(
                model.Status if status else model, name, patch, namespace=_namespace(k, namespace),
                patch_type=_PATCH_TYPES[patch_type], field_manager=self.field_manager,
            )
        return dict(patched)

    async def delete(
        self,
        kind: KindRef,
        name: str,
        namespace: str | None = None,
        *,
        propagation: Literal["Background", "Foreground", "Orphan"] | None = None,
        missing_ok: bool = False,
    ) -> None:
        """Delete an object; :class:`errors.NotFound` unless ``missing_ok``."""
        k = resources.resource(kind)
        try:
            with _translated():
                await self.api.delete(resources.model(k), name, namespace=_namespace(k, namespace),
                                      cascade=_CASCADE[propagation] if propagation else None)
        except errors.NotFound:
            if not missing_ok:
                raise


def _namespace(kind: resources.Kind, namespace: str | None) -> str | None:
    if kind.namespaced and not namespace:
        raise ValueError(f"{kind.kind} is namespaced: a namespace is required")
    return namespace if kind.namespaced else None


def _namespace_of(kind: resources.Kind, obj: objects.Object) -> str | None:
    return _namespace(kind, objects.namespace_of(obj))


def _scope(kind: resources.Kind, namespace: str | None) -> str | None:
    if not kind.namespaced:
        return None
    return namespace or generic_client.ALL_NS


# Characters a JSON encoder writes raw (it escapes only U+0000-U+001F) that a YAML reader refuses anywhere in its
# input ("control characters are not allowed": DEL, the C1 controls, the two BMP non-characters) or reads as a line
# break and folds into a space inside a string (NEL, LINE and PARAGRAPH SEPARATOR).
_YAML_UNREADABLE = re.compile("[\x7f-\x9f\u2028\u2029\ufffe\uffff]")


def apply_body(obj: objects.Object) -> objects.Object | msgspec.Raw:
    """`obj` as the body of a server-side apply. The API server reads an apply body as YAML, whose reader refuses
    or alters some characters JSON carries unescaped (a C1 control in a condition message that quotes a Workspace's
    spec made every status apply of that Workspace a 400, found by tests/chaos/hostile/test_fuzzed_workspaces.py):
    a body with one is sent as JSON with those characters ``\\u``-escaped, which YAML reads back as the same
    string."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    if _YAML_UNREADABLE.search(text) is None:
        return obj
    return msgspec.Raw(_YAML_UNREADABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode())


async def json_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The non-blank lines of a stream of JSON documents, split at b"\\n" only (never inside a JSON string, where
    a newline is always escaped, unlike NEL or U+2028)."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield line.decode()
    if buffer.strip():
        yield buffer.decode()

