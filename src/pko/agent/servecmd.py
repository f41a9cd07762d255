"""``agent serve``: open the workspace, optionally install and select a stack, then serve the protocol.

Follows the reference's start-up order and messages: check the auth flags, resolve the workspace directory
(symlinks included), read ``--env-file`` (absent is fine), install the project's dependencies unless
``--skip-install``, select or create ``--stack`` (with ``--secrets-provider`` when creating), then listen.

It must never print secrets from the env file or the kubeconfig.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pko.agent.workspace import Workspace

if TYPE_CHECKING:
    from pko.agent.service import AutomationService
    from pko.protocol.fetchrequest import FetchRequest

log = logging.getLogger("pko.agent.serve")

T = TypeVar("T")

AUTH_NONE = "none"
AUTH_KUBE = "kube"
REVIEW_TIMEOUT = 10.0  # seconds per API call of a review (lightkube's default)


class ServeError(Exception):
    """The agent cannot start; the message says why."""


@dataclass
class ServeOptions:
    workspace: str
    skip_install: bool = False
    stack: str = ""
    secrets_provider: str = ""
    env_file: str = ""
    host: str = "0.0.0.0"
    port: int = 50051
    auth_mode: str = AUTH_NONE
    kube_audiences: list[str] = field(default_factory=list)
    kube_workspace_namespace: str = ""
    kube_workspace_name: str = ""
    pulumi_log_level: int = 0
    kubeconfig: str = ""
    context: str = ""
    #: pko: the source to fetch before anything else (``--fetch-from-stdin``, :mod:`pko.protocol.fetchrequest`)
    fetch: FetchRequest | None = None
    #: pko: where to say that the fetch is over and that the server listens (``--ready-fd``, :mod:`pko.protocol.ready`)
    ready_fd: int | None = None

    def validate(self) -> None:
        if self.auth_mode not in (AUTH_NONE, AUTH_KUBE):
            raise ServeError(f"unsupported auth mode: {self.auth_mode}")
        if self.auth_mode == AUTH_KUBE:
            if not self.kube_audiences:
                raise ServeError("--kube-audience is required when auth mode is kubernetes")
            if not self.kube_workspace_namespace:
                raise ServeError("--kube-workspace-namespace is required when auth mode is kubernetes")
            if not self.kube_workspace_name:
                raise ServeError("--kube-workspace-name is required when auth mode is kubernetes")
        if self.pulumi_log_level < 0:
            raise ServeError("--pulumi-log-level must not be negative")


def resolve_workdir(path: str) -> Path:
    """The true location of the workspace (the pod's ``/share/workspace`` is a symlink into the source)."""
    try:
        return Path(path).resolve(strict=True)
    except OSError as err:
        raise ServeError(f"unable to resolve the workspace directory: {err}") from err


async def open_workspace(options: ServeOptions) -> Workspace:
    workdir = resolve_workdir(options.workspace)
    try:
        workspace = await Workspace.open(workdir, Path(options.env_file) if options.env_file else None)
    except Exception as err:
        raise ServeError(f"unable to open the workspace: {err}") from err
    project = workspace.project()
    runtime = project.get("runtime")
    log.info("opened a local workspace %s (project %s, runtime %s)", workdir, project.get("name"),
             runtime.get("name") if isinstance(runtime, dict) else runtime)
    return workspace


async def prepare(options: ServeOptions, workspace: Workspace) -> None:
    """Install dependencies and select the initial stack, as requested."""
    if not options.skip_install:
        log.info("installing project dependencies")
        try:
            installed = await workspace.install()
        except Exception as err:
            raise ServeError(f"unable to install project dependencies: {err}") from err
        if installed:
            log.info("installation completed")
    else:
        log.info("installation skipped")
        workspace.unpack_early()  # the operator's Install comes once it has connected: the tree need not wait
    if options.stack:
        try:
            created = await workspace.select_or_create_stack(options.stack, options.secrets_provider)
        except Exception as err:
            raise ServeError(f"unable to make an automation server: failed to select stack: {err}") from err
        log.info("created and selected stack %s" if created else "selected existing stack %s", options.stack)


async def _interruptible(step: Coroutine[Any, Any, T]) -> T:
    """Run a start-up step that SIGTERM/SIGINT cancels (interrupting any CLI command it runs) before serving."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(step)
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    try:
        return await task
    except asyncio.CancelledError:
        if task.cancelled():
            raise ServeError("interrupted before the server started") from None
        raise
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


async def fetch_first(fetch: FetchRequest, workspace: str) -> None:
    """Fetch the source into the workspace's folder, as `init` would have (its failure is this start's)."""
    from pko.agent import initcmd

    try:
        seconds = await asyncio.to_thread(initcmd.fetch_first, fetch, Path(workspace), os.environ)
    except initcmd.InitError as err:
        raise ServeError(str(err)) from None
    log.info("fetched the source in %.2fs", seconds)


def _server_parts() -> tuple[Callable[..., Awaitable[None]], type[AutomationService]]:
    """The gRPC server and the service (gRPC and protobuf: most of what `serve` imports)."""
    from pko.agent import grpcserver, service

    return grpcserver.serve, service.AutomationService


async def run(options: ServeOptions) -> None:
    """Start the agent and serve until shut down by a signal."""
    options.validate()
    from pko.protocol import ready  # small, but the package is the wire's: loaded when serving, as gRPC is

    teller = ready.Teller(options.ready_fd)
    authenticator = None
    if options.auth_mode == AUTH_KUBE:
        from pko.agent import apiserver, auth

        try:
            server = apiserver.endpoint(options.kubeconfig, options.context, REVIEW_TIMEOUT)
        except Exception as err:
            raise ServeError(f"unable to load the kubeconfig: {err}") from err
        review_token, review_access = auth.kube_reviewers(server)
        authenticator = auth.KubeAuth(review_token, review_access, tuple(options.kube_audiences),
                                      options.kube_workspace_namespace, options.kube_workspace_name)
        log.info("activated the Kubernetes authorization mode (audiences %s, workspace %s/%s)",
                 options.kube_audiences, options.kube_workspace_namespace, options.kube_workspace_name)
    # gRPC and protobuf (most of the start-up's imports) load in a thread while `pulumi version` runs
    server_parts = asyncio.ensure_future(asyncio.to_thread(_server_parts))
    if options.fetch is not None:
        await fetch_first(options.fetch, options.workspace)
        teller.fetched()
    workspace = await _interruptible(open_workspace(options))
    await _interruptible(prepare(options, workspace))
    serve, automation_service = await server_parts
    service = automation_service(workspace, options.pulumi_log_level)
    await serve(service, options.host, options.port, authenticator, on_listening=lambda _port: teller.listening())
