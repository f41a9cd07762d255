"""Resolving a Stack's program source to a Workspace source and a commit: git, Flux, or a Program.

A branch is resolved the way `git ls-remote` would, with the Stack's own credentials (read from Secrets in the
Stack's namespace only); a Flux source or a Program contributes its artifact URL, digest and revision. Problems
come back as :class:`Unavailable` with the reference's reason and message, never as exceptions that would make
the controller crash-loop.

Must never: read a Secret outside the Stack's namespace, or put a credential into a message or a log line.
"""

from __future__ import annotations

import asyncio
import base64
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pko.api import conditions
from pko.api import stack as stack_api
from pko.controllers.stack import workspace as ws_build
from pko.kube import client as kclient
from pko.kube import errors, objects, resources
from pko.sources import git as git_source
from pko.sources import githubapp

SOURCE_UNAVAILABLE_RETRY = 30.0
_SHA = re.compile(r"^[0-9a-f]{40}$")
_API_VERSION = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9]+$")  # group/version, as a URL path takes it
_KIND = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


class RefNotFound(Exception):
    """The remote has no ref by that name."""


@dataclass(frozen=True)
class Resolved:
    source: ws_build.Source
    commit: str


@dataclass(frozen=True)
class Unavailable:
    reason: str  # SpecInvalid or SourceUnavailable
    message: str
    requeue_after: float | None = None
    event: bool = False  # also record StackConfigInvalid


def flux_kind(ref: stack_api.FluxSourceReference) -> resources.Kind:
    """The kind a Flux `sourceRef` names (registered on first use)."""
    if "/" not in ref.api_version or not ref.kind:
        raise ValueError(f'invalid sourceRef apiVersion/kind "{ref.api_version}"/"{ref.kind}"')
    # pko: what would not fit in a request URL (a control character, a `/` in the kind) is refused here too
    if not _API_VERSION.match(ref.api_version) or not _KIND.match(ref.kind) or not kclient.plausible_name(ref.name):
        raise ValueError(f"invalid sourceRef apiVersion/kind/name {ref.api_version!r}/{ref.kind!r}/{ref.name!r}: "
                         "not a Kubernetes group/version, kind and object name")
    key = f"{ref.api_version}/{ref.kind}"
    try:
        return resources.resource(key)
    except KeyError:
        pass
    try:  # the same kind in another version of its group (Flux v2.x serves OCIRepository/Bucket as v1)
        plural = resources.resource(f"{ref.kind}.{objects.group_of(ref.api_version)}").plural
    except KeyError:
        plural = _plural(ref.kind)
    return resources.register(resources.Kind(ref.api_version, ref.kind, plural))


def _plural(kind: str) -> str:
    """The plural controller-gen gives a kind (GitRepository → gitrepositories, HelmChart → helmcharts)."""
    lower = kind.lower()
    if lower.endswith("y") and lower[-2:-1] not in ("a", "e", "i", "o", "u"):
        return lower[:-1] + "ies"
    if lower.endswith(("s", "x", "z", "ch", "sh")):
        return lower + "es"
    return lower + "s"


class Resolver:
    def __init__(self, client: kclient.Client, *, watch_flux_kind: Callable[[resources.Kind], None] | None = None,
                 github_api_url: str = githubapp.API_URL, git_timeout: float = git_source.DEFAULT_TIMEOUT) -> None:
        self.client = client
        self.watch_flux_kind = watch_flux_kind
        self.github_api_url = github_api_url
        self.git_timeout = git_timeout

    async def resolve(self, stack: stack_api.Stack) -> Resolved | Unavailable:
        spec = stack_api.spec_of(stack)
        if spec.project_repo or spec.commit or spec.branch:
            return await self._git(stack)
        if spec.flux_source is not None:
            return await self._flux(stack, spec.flux_source)
        if spec.program_ref is not None:
            return await self._program(stack, spec.program_ref.name)
        return Resolved(ws_build.Source(), "")

    # --- git ---------------------------------------------------------------------------------------------------

    async def _git(self, stack: stack_api.Stack) -> Resolved | Unavailable:
        spec = stack_api.spec_of(stack)
        try:
            auth = await self._git_auth(stack)
            ws_build.validate_git(spec)
            git_source.check_url(spec.project_repo or "")
        except (ws_build.StallError, git_source.UnsupportedURLError) as err:
            return Unavailable(conditions.STALLED_SPEC_INVALID, str(err), event=True)
        ref = spec.commit or spec.branch or ""
        if _SHA.match(ref):
            commit = ref
        else:
            # The transports time out on their own; the timeout is the backstop that frees this worker regardless
            # (asyncio.timeout, not wait_for: Python 3.11's wait_for can lose a cancellation).
            try:
                async with asyncio.timeout(self.git_timeout + 5):
                    commit = await asyncio.to_thread(_ls_remote_commit, spec.project_repo or "", ref, auth,
                                                     self.git_timeout)
            except TimeoutError:
                return Unavailable(conditions.STALLED_SOURCE_UNAVAILABLE,
                                   f"listing the refs of {git_source.redact(spec.project_repo or '')} timed out "
                                   f"after {self.git_timeout:g}s", requeue_after=SOURCE_UNAVAILABLE_RETRY)
            except Exception as err:  # network, auth, protocol: the source is unavailable for now
                return Unavailable(conditions.STALLED_SOURCE_UNAVAILABLE, _safe(_describe(err), auth),
                                   requeue_after=SOURCE_UNAVAILABLE_RETRY)
        return Resolved(ws_build.Source(git=ws_build.git_source(spec, commit)), commit)

    async def _secret_value(self, stack: stack_api.Stack, ref: stack_api.ResourceRef) -> str:
        namespace = stack.metadata.namespace or ""
        if ref.type != stack_api.REF_SECRET:
            raise ws_build.StallError(
                f"{ref.type} selectors are no longer supported in v2, please use a secret reference instead")
        if ref.secret is None:
            raise ws_build.StallError("missing secret reference in ResourceRef")
        if ref.secret.namespace not in (None, "", namespace):
            raise ws_build.StallError(ws_build.NAMESPACE_ISOLATION)
        data = await self._secret_data(namespace, ref.secret.name)
        if ref.secret.key not in data:
            raise ws_build.StallError(f'no key "{ref.secret.key}" found in secret {namespace}/{ref.secret.name}')
        return data[ref.secret.key]

    async def _secret_data(self, namespace: str, name: str) -> dict[str, str]:
        try:
            secret = await self.client.get(resources.SECRET, name, namespace)
        except errors.NotFound as err:
            raise ws_build.StallError(f"unable to get secret {namespace}/{name}: not found") from err
        return {k: base64.b64decode(v).decode(errors="replace") for k, v in (secret.get("data") or {}).items()}

    async def _git_auth(self, stack: stack_api.Stack) -> git_source.GitAuth:
        spec = stack_api.spec_of(stack)
        if spec.git_auth_secret:
            data = await self._secret_data(stack.metadata.namespace or "", spec.git_auth_secret)
            if "sshPrivateKey" in data:
                return git_source.GitAuth(ssh_private_key=data["sshPrivateKey"], password=data.get("password", ""))
            if "accessToken" in data:
                return git_source.GitAuth(token=data["accessToken"])
            if "username" in data:
                if "password" not in data:
                    raise ws_build.StallError(
                        f'creating gitAuth: no key "password" found in secret '
                        f"{stack.metadata.namespace}/{spec.git_auth_secret}")
                return git_source.GitAuth(username=data["username"], password=data["password"])
            return git_source.GitAuth()
        auth = spec.git_auth
        if auth is None:
            return git_source.GitAuth()
        try:
            if auth.ssh_auth is not None:
                key = await self._secret_value(stack, auth.ssh_auth.ssh_private_key)
                password = await self._secret_value(stack, auth.ssh_auth.password) if auth.ssh_auth.password else ""
                return git_source.GitAuth(ssh_private_key=key, password=password)
            if auth.access_token is not None:
                return git_source.GitAuth(token=await self._secret_value(stack, auth.access_token))
            if auth.github_app is not None:
                app = auth.github_app
                app_id = await self._secret_value(stack, app.app_id)
                installation = await self._secret_value(stack, app.installation_id)
                key = await self._secret_value(stack, app.private_key)
                token = await asyncio.to_thread(githubapp.installation_token, app_id, installation, key,
                                                self.github_api_url)
                return git_source.GitAuth(username="x-access-token", password=token)
            if auth.basic_auth is not None:
                return git_source.GitAuth(username=await self._secret_value(stack, auth.basic_auth.user_name),
                                          password=await self._secret_value(stack, auth.basic_auth.password))
        except ws_build.StallError as err:
            raise ws_build.StallError(f"resolving gitAuth: {err}") from err
        except githubapp.GitHubAppError as err:
            raise ws_build.StallError(f"resolving gitAuth GitHub App token: {err}") from err
        raise ws_build.StallError(
            "gitAuth config must specify exactly one of 'personalAccessToken', 'sshPrivateKey' or 'basicAuth'")

    # --- Flux and Program --------------------------------------------------------------------------------------

    async def _flux(self, stack: stack_api.Stack, flux: stack_api.FluxSourceRef) -> Resolved | Unavailable:
        try:
            kind = flux_kind(flux.source_ref)
            if self.watch_flux_kind is not None:
                self.watch_flux_kind(kind)
        except ValueError as err:
            return Unavailable(conditions.STALLED_SPEC_INVALID, f"cannot process source reference: {err}")
        try:
            obj = await self.client.get(kind, flux.source_ref.name, stack.metadata.namespace)
        except errors.NotFound as err:
            return Unavailable(conditions.STALLED_SOURCE_UNAVAILABLE, f"could not resolve sourceRef: {err.message}",
                               requeue_after=SOURCE_UNAVAILABLE_RETRY)
        except errors.ApiError as err:
            if err.code == 404:  # the kind itself is not served (Flux not installed)
                return Unavailable(conditions.STALLED_SOURCE_UNAVAILABLE,
                                   f"could not resolve sourceRef: {err.message}",
                                   requeue_after=SOURCE_UNAVAILABLE_RETRY)
            raise
        artifact = _artifact(obj)
        if artifact is None:
            return Unavailable(conditions.STALLED_SOURCE_UNAVAILABLE, "Flux source has no artifact",
                               requeue_after=SOURCE_UNAVAILABLE_RETRY)
        return Resolved(ws_build.Source(flux=_flux_source(artifact, flux.dir)), str(artifact.get("revision", "")))

    async def _program(self, stack: stack_api.Stack, name: str) -> Resolved | Unavailable:
        obj = await self.client.get_or_none(resources.PROGRAM, name, stack.metadata.namespace)
        if obj is None:
            return Unavailable(conditions.STALLED_SOURCE_UNAVAILABLE, "unable to retrieve program for stack",
                               requeue_after=SOURCE_UNAVAILABLE_RETRY)
        artifact = _artifact(obj)
        if artifact is None:
            return Unavailable(conditions.STALLED_SOURCE_UNAVAILABLE, "Program has no artifact",
                               requeue_after=SOURCE_UNAVAILABLE_RETRY)
        return Resolved(ws_build.Source(flux=_flux_source(artifact, None)), str(artifact.get("revision", "")))


def _artifact(obj: dict[str, Any]) -> dict[str, Any] | None:
    artifact = (obj.get("status") or {}).get("artifact")
    return artifact if isinstance(artifact, dict) and artifact.get("url") else None


def _flux_source(artifact: dict[str, Any], directory: str | None) -> dict[str, Any]:
    source = {"url": artifact["url"], "digest": artifact.get("digest") or artifact.get("checksum") or ""}
    if directory:
        source["dir"] = directory
    return source


def _ls_remote_commit(url: str, ref: str, auth: git_source.GitAuth, timeout: float) -> str:
    """The commit `ref` (a full ref like refs/heads/main, or a short one like main) points at on the remote."""
    with git_source._client(url, auth, timeout) as (client, path):
        refs = client.get_refs(path)
    table = getattr(refs, "refs", refs)
    for name, sha in table.items():
        text = name.decode()
        if sha and not text.endswith("^{}") and (text == ref or _short(text) == ref):
            return str(sha.decode())
    raise RefNotFound(f'no commits found for ref "{ref}"')


def _short(ref: str) -> str:
    for prefix in ("refs/heads/", "refs/tags/", "refs/remotes/", "refs/"):
        if ref.startswith(prefix):
            return ref[len(prefix):]
    return ref


def _describe(err: Exception) -> str:
    """A message for `err` that says what happened even when the exception has no text (a bare socket timeout)."""
    text = str(err)
    if isinstance(err, (TimeoutError, socket.timeout)) or "timed out" in text.lower():
        return f"the git server did not answer in time: {text or type(err).__name__}"
    return text or type(err).__name__


def _safe(message: str, auth: git_source.GitAuth) -> str:
    for secret in (auth.password, auth.token):
        if secret:
            message = message.replace(secret, "***")
    return message
