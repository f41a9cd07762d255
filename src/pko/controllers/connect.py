"""Connections from the operator to workspace agents: gRPC channels plus audience-bound bearer tokens.

The agent authorises each RPC with TokenReview (audience `<workspace>.<namespace>`) and a SubjectAccessReview for
`workspaces/rpc`; the operator presents a TokenRequest token of its own service account, cached per audience and
refreshed five minutes before it expires. Tokens never appear in logs or errors.

A workspace's channel is kept between its reconciles and operations (one per workspace and address): opening a
channel, waiting for it to be ready and closing it again for every reconcile was 7% of a fleet's operator samples
(py-spy, 200 Stacks). A channel goes when its workspace's agent moves to another address, when the workspace
is forgotten (deleted, or its agent stopped), when it stays unused while more than :data:`KEPT` are kept, or when
the operator stops; never while a call holds it.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
import grpc.aio

from pko.controllers.settings import DEFAULT_NAMESPACE, DEFAULT_SERVICE_ACCOUNT
from pko.kube import client as kclient
from pko.kube import tokens
from pko.protocol import client as agent_client
from pko.runtime import controller as runtime_controller

MAX_MESSAGE_BYTES = 400 * 1024 * 1024
#: A workspace pod is dialled as soon as it runs, often before its agent listens (neither operator gives the pod a
#: probe). gRPC's default reconnect backoff (1 s, then x1.6) would leave the dial waiting seconds after the agent is
#: up, and a whole fleet starting at once used to hit the connect timeout; retrying every 100-500 ms connects
#: within a fraction of a second of the agent listening, for the price of a few refused TCP connects.
#: The reference agent ends a failed operation with the CLI's whole error output as the status message, a trailer;
#: gRPC's C core refuses trailers over 16 KiB by default, which lost the error ("Stream removed (received metadata
#: size exceeds hard limit ...)") when a Kubernetes program failed with a long diagnostic.
MAX_METADATA_BYTES = 4 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_metadata_size", MAX_METADATA_BYTES),
    ("grpc.absolute_max_metadata_size", MAX_METADATA_BYTES),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
]
REFRESH_BEFORE = datetime.timedelta(minutes=5)
#: How often the expired tokens are dropped: a look through every token kept (one a workspace: a thousand in a
#: fleet of 1,000) at each connection made a fleet's connections cost the square of its size.
PRUNE_EVERY = datetime.timedelta(minutes=1)
#: Channels kept while unused, beyond which the least recently used idle ones are closed (each costs a socket and
#: a little memory in gRPC's core; a workspace's reconciles come minutes apart at most while it is awake).
KEPT = 256


class ConnectionFailed(Exception):
    """The agent could not be reached (or no token could be minted) in time."""


# An agent saying no (refusing the caller, a failed operation) or out of reach is the world, not a bug: reconciles
# failing with these log one line, without a traceback.
runtime_controller.expect(grpc.aio.AioRpcError, ConnectionFailed)


class _Kept:
    """A channel kept for one workspace: its address, and how many connections hold it now."""

    def __init__(self, target: str, channel: grpc.aio.Channel) -> None:
        self.target = target
        self.channel = channel
        self.holders = 0
        self.retired = False  # closed once its last holder lets go


@dataclass
class Connection:
    """A ready channel to one agent: call `stub.X(request, metadata=conn.metadata)`. Closing it lets go of the
    channel (kept for the workspace's next connection)."""

    address: str
    channel: grpc.aio.Channel
    stub: agent_client.AutomationStub
    metadata: tuple[tuple[str, str], ...]
    control: agent_client.ControlStub  # pko's OperationControl: only for an agent announcing "keep-running"
    release: Callable[[], Awaitable[None]] | None = None

    async def close(self) -> None:
        release, self.release = self.release, None
        if release is not None:
            await release()

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def open_channel(target: str) -> grpc.aio.Channel:
    """A channel to an agent, retrying its connection quickly (see :data:`CHANNEL_OPTIONS`)."""
    return grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)


def audience(namespace: str, name: str) -> str:
    return f"{name}.{namespace}"


class Connector:
    """Opens authenticated connections to agents on behalf of the operator's service account."""

    def __init__(
        self,
        client: kclient.Client,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        service_account: str = DEFAULT_SERVICE_ACCOUNT,
        localhost_override: str | None = None,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.client = client
        self.namespace = namespace or DEFAULT_NAMESPACE
        self.service_account = service_account or DEFAULT_SERVICE_ACCOUNT
        self.localhost_override = localhost_override or None
        self._clock = clock
        self._tokens: dict[str, tokens.Token] = {}
        self._pruned = datetime.datetime.min.replace(tzinfo=datetime.UTC)
        self._lock = asyncio.Lock()
        self._kept: dict[tuple[str, str], _Kept] = {}  # by workspace (namespace, name), least recently used first
        self._closing_tasks: set[asyncio.Task[None]] = set()

    async def token(self, audience_: str) -> str:
        async with self._lock:
            cached = self._tokens.get(audience_)
            if cached is None or cached.expires - REFRESH_BEFORE <= self._clock():
                cached = await tokens.request(self.client, self.namespace, self.service_account, [audience_])
                self._tokens[audience_] = cached
            self._prune()
            return cached.value

    def _prune(self) -> None:
        now = self._clock()
        if self._pruned <= now < self._pruned + PRUNE_EVERY:  # (a clock set back prunes at once)
            return
        self._pruned = now
        for key in [k for k, t in self._tokens.items() if t.expires <= now]:
            del self._tokens[key]

    async def connect(self, namespace: str, name: str, address: str, timeout: float) -> Connection:
        """A ready connection to the agent of workspace `namespace/name` at `address`, or ConnectionFailed."""
        target = self.localhost_override or address
        try:
            token = await self.token(audience(namespace, name))
        except Exception as err:
            raise ConnectionFailed(f"unable to obtain a token for the workspace: {err}") from err
        kept = self._channel((namespace, name), target)
        kept.holders += 1
        try:
            async with asyncio.timeout(timeout):  # not wait_for: it can lose a cancellation (Python 3.11)
                await kept.channel.channel_ready()
        except BaseException as err:
            kept.holders -= 1
            if self._kept.get((namespace, name)) is kept:  # a channel that never got ready is not kept
                del self._kept[(namespace, name)]
            kept.retired = True
            await self._close_if_unheld(kept)
            if isinstance(err, TimeoutError | grpc.aio.AioRpcError):
                raise ConnectionFailed(f"unable to connect to the workspace agent at {target}: timed out") from err
            raise

        async def release() -> None:
            kept.holders -= 1
            await self._close_if_unheld(kept)

        return Connection(target, kept.channel, agent_client.stub(kept.channel),
                          (("authorization", f"Bearer {token}"),), agent_client.control_stub(kept.channel),
                          release)

    def _channel(self, key: tuple[str, str], target: str) -> _Kept:
        """The workspace's kept channel to `target`, or a new one (retiring one to another address)."""
        kept = self._kept.pop(key, None)
        if kept is not None and kept.target != target:
            kept.retired = True
            self._closing(kept)
            kept = None
        if kept is None:
            kept = _Kept(target, open_channel(target))
            self._trim()
        self._kept[key] = kept  # the most recently used last
        return kept

    def _trim(self) -> None:
        """Close the least recently used idle channels beyond :data:`KEPT`."""
        idle = [key for key, kept in self._kept.items() if kept.holders == 0]
        for key in idle[: max(0, len(self._kept) + 1 - KEPT)]:
            kept = self._kept.pop(key)
            kept.retired = True
            self._closing(kept)

    async def forget(self, namespace: str, name: str) -> None:
        """The workspace's agent is gone (stopped, or the workspace deleted): its channel goes once unheld."""
        kept = self._kept.pop((namespace, name), None)
        if kept is not None:
            kept.retired = True
            await self._close_if_unheld(kept)

    async def close(self) -> None:
        """Close every kept channel (the operator stops; calls still holding one are being cancelled)."""
        kept, self._kept = list(self._kept.values()), {}
        for one in kept:
            one.retired = True
            await one.channel.close(None)
        await asyncio.gather(*self._closing_tasks, return_exceptions=True)

    async def _close_if_unheld(self, kept: _Kept) -> None:
        if kept.retired and kept.holders <= 0:
            await kept.channel.close(None)

    def _closing(self, kept: _Kept) -> None:
        """Close a retired channel now if nothing holds it (from synchronous code: a task of its own)."""
        if kept.holders <= 0:
            task = asyncio.get_running_loop().create_task(kept.channel.close(None))
            self._closing_tasks.add(task)
            task.add_done_callback(self._closing_tasks.discard)
