"""The async API client every pko component uses: plain dicts in and out (or, for a read, the typed model from
``pko.api`` the caller names), our errors, server-side apply first.

Requests go out through :mod:`pko.kube.transport` (aiohttp: a request costs the operator a third to a half of what
lightkube's httpx2 client did); lightkube reads the kubeconfig and serves the few calls that need its models (pod
logs, TokenRequest). This layer adds what the operator needs on every call: kinds from :mod:`pko.kube.resources`
(so CRDs and built-ins look alike), the operator's field manager and forced ownership for server-side apply (the Go
operator applies all status with ``ForceOwnership``), watch bookmarks, "all namespaces" as the default for list and
watch, and :mod:`pko.kube.errors` exceptions.

This module must never cache, retry or interpret objects: caching and retrying belong to ``pko.runtime``,
interpreting to the controllers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import httpx2
import lightkube
import msgspec
from lightkube.config.kubeconfig import SingleConfig
from lightkube.types import PatchType

from pko.api import meta
from pko.kube import errors, objects, ratelimit, resources, transport

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

    def __init__(self, api: lightkube.AsyncClient, *, field_manager: str = FIELD_MANAGER,
                 http: transport.Transport | None = None) -> None:
        self.api = api
        self.http = http if http is not None else transport.Transport(_config_of(api))
        self.field_manager = field_manager
        self._owned = False
        self.limiter: ratelimit.TokenBucket | None = self.http.limiter

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
        api = lightkube.AsyncClient(config=config, timeout=httpx2.Timeout(timeout))
        http = transport.Transport(_config_of(api), timeout=timeout, limiter=limiter, user_agent=user_agent)
        client = cls(api, field_manager=field_manager, http=http)
        client._owned = True
        if user_agent:  # the few calls lightkube still sends (logs, tokens) say who sent them too
            client.api._client._client.headers["User-Agent"] = user_agent
        if http.limiter is not None:
            bucket = http.limiter

            async def admit(_request: Any) -> None:
                await bucket.acquire()

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
            await self.http.close()
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
        return _decode(await self.http.request("GET", path(k, _namespace(k, namespace), name)))

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
        params: dict[str, str | int | None] = {
            "limit": chunk_size,
            "labelSelector": ",".join(s for s in (label_selector(labels), selector) if s) or None,
            "fieldSelector": label_selector(fields),
        }
        url = path(k, None if not k.namespaced else (namespace or None))
        items: list[objects.Object] = []
        while True:
            page = _decode(await self.http.request("GET", url, params=params))
            items.extend(page.get("items") or [])
            listed = page.get("metadata") or {}
            resource_version = str(listed.get("resourceVersion") or "")
            if not listed.get("continue"):
                break
            params["continue"] = listed["continue"]
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
        params: dict[str, str | int | None] = {
            "watch": "true",
            "timeoutSeconds": timeout_seconds,
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true" if bookmarks else None,
            "labelSelector": ",".join(s for s in (label_selector(labels), selector) if s) or None,
        }
        url = path(k, None if not k.namespaced else (namespace or None))
        while True:
            async with self.http.stream(url, params=params) as chunks:
                async for line in json_lines(chunks):
                    event = _decode(line)
                    event_type = str(event.get("type") or "")
                    obj = event.get("object")
                    if not isinstance(obj, dict):
                        continue
                    if event_type == "ERROR":
                        raise transport.api_error(int(obj.get("code") or 500), msgspec.json.encode(obj))
                    version = objects.resource_version_of(obj)
                    if version:
                        params["resourceVersion"] = version
                    yield WatchEvent(event_type, obj)
            # The server ended the stream (its timeout): go on from the last version seen.

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
        return _decode(await self.http.request("POST", path(k, _namespace_of(k, obj)), body=_encode(obj),
                                               params={"fieldManager": self.field_manager},
                                               content_type="application/json"))

    async def replace(self, obj: objects.Object) -> objects.Object:
        """PUT the whole object; with ``metadata.resourceVersion`` set this fails with :class:`errors.Conflict`
        when someone else changed it first (optimistic concurrency)."""
        k = resources.of(obj)
        return _decode(await self.http.request("PUT", path(k, _namespace_of(k, obj), objects.name_of(obj)),
                                               body=_encode(obj), params={"fieldManager": self.field_manager},
                                               content_type="application/json"))

    async def replace_status(self, obj: objects.Object) -> objects.Object:
        """PUT the status subresource (optimistic concurrency as :meth:`replace`)."""
        k = resources.of(obj)
        return _decode(await self.http.request(
            "PUT", path(k, _namespace_of(k, obj), objects.name_of(obj), "status"), body=_encode(obj),
            params={"fieldManager": self.field_manager}, content_type="application/json"))

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
        return _decode(await self.http.request(
            "PATCH", path(k, _namespace_of(k, obj), objects.name_of(obj), "status" if status else None),
            body=apply_body(obj), content_type=PatchType.APPLY.value,
            params={"fieldManager": field_manager or self.field_manager, "force": "true" if force else None}))

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
        return _decode(await self.http.request(
            "PATCH", path(k, _namespace(k, namespace), name, "status" if status else None), body=_encode(patch),
            content_type=_PATCH_TYPES[patch_type].value, params={"fieldManager": self.field_manager}))

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
            await self.http.request("DELETE", path(k, _namespace(k, namespace), name),
                                    params={"propagationPolicy": propagation})
        except errors.NotFound:
            if not missing_ok:
                raise


def _namespace(kind: resources.Kind, namespace: str | None) -> str | None:
    if kind.namespaced and not namespace:
        raise ValueError(f"{kind.kind} is namespaced: a namespace is required")
    return namespace if kind.namespaced else None


def _namespace_of(kind: resources.Kind, obj: objects.Object) -> str | None:
    return _namespace(kind, objects.namespace_of(obj))


def _config_of(api: lightkube.AsyncClient) -> SingleConfig:
    config = api._client.config
    if config is None:  # lightkube always resolves one; never None once its client is built
        raise ValueError("the lightkube client has no configuration")
    return config


def path(kind: resources.Kind, namespace: str | None, name: str | None = None, subresource: str | None = None) -> str:
    """The URL path of `kind`'s objects (in `namespace`; None: all of them), of one (`name`), or of its
    `subresource`: ``/api/v1/namespaces/ns/configmaps/x``, ``/apis/pulumi.com/v1/stacks``."""
    group = kind.group
    parts = ["/api" if not group else f"/apis/{group}", kind.version]
    if namespace:
        parts += ["namespaces", quote(namespace, safe="")]
    parts.append(kind.plural)
    if name is not None:
        parts.append(quote(name, safe=""))
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


_encode = msgspec.json.encode


def _decode(data: bytes | str) -> objects.Object:
    decoded = msgspec.json.decode(data)
    if not isinstance(decoded, dict):
        raise errors.ApiError(500, "InternalError", f"the API server answered with a {type(decoded).__name__}, "
                                                    "not an object")
    return decoded


# Characters a JSON encoder writes raw (it escapes only U+0000-U+001F) that a YAML reader refuses anywhere in its
# input ("control characters are not allowed": DEL, the C1 controls, the two BMP non-characters) or reads as a line
# break and folds into a space inside a string (NEL, LINE and PARAGRAPH SEPARATOR), as text and as their UTF-8 bytes.
_YAML_UNREADABLE = re.compile("[\x7f-\x9f\u2028\u2029\ufffe\uffff]")
_YAML_UNREADABLE_UTF8 = re.compile(b"\x7f|\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9]|\xef\xbf[\xbe\xbf]")


def apply_body(obj: objects.Object) -> bytes:
    """`obj` encoded as the body of a server-side apply. The API server reads an apply body as YAML, whose reader
    refuses or alters some characters JSON carries unescaped (a C1 control in a condition message that quotes a
    Workspace's spec made every status apply of that Workspace a 400, found by
    tests/chaos/hostile/test_fuzzed_workspaces.py): a body with one has those characters ``\\u``-escaped, which YAML
    reads back as the same string. Encoded once and looked through as bytes: most bodies have none."""
    body = _encode(obj)
    if _YAML_UNREADABLE_UTF8.search(body) is None:
        return body
    return _YAML_UNREADABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", body.decode()).encode()


async def json_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The non-blank lines of a stream of JSON documents, split at b"\\n" only (never inside a JSON string, where
    a newline is always escaped, unlike NEL or U+2028: a reader that splits as ``str.splitlines`` does broke every
    watch of a kind for good at one object with a NEL in a string, found by
    tests/chaos/hostile/test_fuzzed_workspaces.py)."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer
