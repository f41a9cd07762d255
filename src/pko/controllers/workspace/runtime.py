"""Where a Workspace's agent runs: the :class:`WorkspaceRuntime` interface the Workspace reconciler drives.

Why: the reconciler's steps after the agent runs (connect, initialise once, report Ready) are the same wherever
it runs; only placing it differs. Two runtimes implement this today — ``pod`` (a StatefulSet and a headless
Service, as the Go operator: :mod:`~pko.controllers.workspace.pod`) and ``local`` (child processes of the operator:
:mod:`~pko.controllers.workspace.local`) — and the scale-to-zero and Job-per-operation runtimes to come fit the
same calls: :meth:`~WorkspaceRuntime.place`, :meth:`~WorkspaceRuntime.sleep` and
:meth:`~WorkspaceRuntime.stopped` (pko's scale-to-zero), :meth:`~WorkspaceRuntime.remove` and
:meth:`~WorkspaceRuntime.watch`.

This module only declares; it must never do I/O.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pko.api import workspace as ws_api
from pko.kube import objects
from pko.runtime import controller as ctl
from pko.runtime import manager

# Workspace Ready reasons a runtime reports while its agent is not reachable yet (the Go operator's).
ROLLING_UPDATE = "RollingUpdate"
WAITING_FOR_REPLICAS = "WaitingForReplicas"
#: pko: Ready and Stalled when the API server refuses the workspace's StatefulSet as invalid, and no migration of an
#: immutable field explains it (the template's fault: a `podTemplate` typo, an admission policy).
STATEFULSET_INVALID = "StatefulSetInvalid"
#: pko: the same for the workspace's headless Service (its `serviceTemplate`'s labels or annotations, a policy).
SERVICE_INVALID = "ServiceInvalid"
#: The Stalled reasons of a refusal: tried again every :data:`REFUSED_RETRY_AFTER` seconds with the spec unchanged
#: (an admission policy may be what changes), and at once when the spec changes.
REFUSED = frozenset({STATEFULSET_INVALID, SERVICE_INVALID})
REFUSED_RETRY_AFTER = 300.0


def _same_path(path: str) -> str:
    return path


@dataclass(frozen=True)
class Placed:
    """The agent runs at `address`. `initialized` says whether it was initialised already (the pod's
    ``auto.pulumi.com/initialized`` annotation); `mark_initialized` records that it now is (False: the record
    failed and the agent was removed to start over); `translate` maps a path inside the pod to where the agent
    sees it. `fetch_seconds` is how long fetching the source into this agent's workspace took, when the runtime
    knows (the ``fetch`` init container's run, or the local ``agent init``): pko's fetch phase metric."""

    address: str
    initialized: bool
    mark_initialized: Callable[[], Awaitable[bool]]
    translate: Callable[[str], str] = _same_path
    fetch_seconds: float | None = None


@dataclass(frozen=True)
class Pending:
    """The agent is not reachable yet. With a `reason`, the Workspace is ``Ready=False`` with it and `message`
    and has no address, and ``Stalled`` with them too when `stalled` (nothing but a change of its spec helps);
    the reconcile ends with `result`."""

    result: ctl.Result | None = None
    reason: str | None = None
    message: str = ""
    stalled: bool = False


Placement = Placed | Pending


class WorkspaceRuntime(Protocol):
    """Runs the agent of each Workspace."""

    async def place(self, workspace: ws_api.Workspace, statefulset: dict[str, Any]) -> Placement:
        """Make the agent of `workspace` run as `statefulset` describes it."""
        ...

    async def sleep(self, workspace: ws_api.Workspace, statefulset: dict[str, Any]) -> None:
        """pko: run nothing for `workspace` until the next :meth:`place` (`statefulset` has no replicas): the
        ``pod`` runtime scales the StatefulSet to zero, the ``local`` one stops the agent's processes."""
        ...

    async def stopped(self, key: objects.ObjectKey) -> bool:
        """pko: whether nothing runs for the Workspace `key` any more after :meth:`sleep` (a pod still terminating
        is on the node: the pool keeps its slot taken until it is gone)."""
        ...

    async def remove(self, key: objects.ObjectKey) -> None:
        """Stop what this runtime runs for a Workspace that is gone or being deleted (owned objects excepted:
        the garbage collector removes those)."""
        ...

    def watch(self, mgr: manager.Manager, controller: ctl.Controller) -> None:
        """Re-queue Workspaces on `controller` when what this runtime runs changes (a rollout, an exit)."""
        ...

    async def close(self) -> None:
        """Stop everything this runtime started (on operator shutdown)."""
        ...
