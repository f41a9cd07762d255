"""Prepare a control plane for the operator and run the operator in-process: shared by e2e tests and `pko dev`.

`install_crds` applies our generated CRDs and waits until they are Established. `install_identity` creates the
operator's namespace and service account and grants it `workspaces/rpc` (the agent authorises the operator's
token with a SubjectAccessReview). `Operator` runs the real manager and controllers as asyncio tasks in this
process, against a real API server; agents of the `local` runtime run as real child processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import sys
import threading
import time
import traceback
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pko.api import crds
from pko.controllers import settings as operator_settings
from pko.controllers import wiring
from pko.controllers.settings import DEFAULT_NAMESPACE, DEFAULT_SERVICE_ACCOUNT
from pko.kube import client as kclient
from pko.kube import errors
from pko.kube import resources as kres
from pko.runtime import manager

CRD = kres.register(kres.Kind("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions",
                              namespaced=False))
CLUSTER_ROLE = kres.register(kres.Kind("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", namespaced=False))
CLUSTER_ROLE_BINDING = kres.register(kres.Kind("rbac.authorization.k8s.io/v1", "ClusterRoleBinding",
                                               "clusterrolebindings", namespaced=False))
TEST_FIELD_MANAGER = "pko-testing"


async def install_crds(client: kclient.Client, timeout: float = 60.0) -> None:
    """Apply the four CRDs and wait until the API server serves them."""
    manifests = crds.all_crds()
    for manifest in manifests.values():
        await client.apply(dict(manifest), field_manager=TEST_FIELD_MANAGER)
    await wait_established(client, [str(m["metadata"]["name"]) for m in manifests.values()], timeout)


async def wait_established(client: kclient.Client, names: list[str], timeout: float = 60.0) -> None:
    """Wait until the API server serves each of the CRDs `names` (their ``Established`` condition)."""
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            crd = await client.get(CRD, name)
            found = [c for c in (crd.get("status") or {}).get("conditions") or [] if c.get("type") == "Established"]
            if found and found[0].get("status") == "True":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout:.0f}s")
            await asyncio.sleep(0.2)


async def ensure_namespace(client: kclient.Client, name: str) -> None:
    with contextlib.suppress(errors.AlreadyExists):
        await client.create(kres.NAMESPACE.new(name))


async def install_identity(client: kclient.Client, namespace: str = DEFAULT_NAMESPACE,
                           service_account: str = DEFAULT_SERVICE_ACCOUNT) -> None:
    """The operator's service account, allowed to call workspace agents (minimal: the RBAC test covers the rest)."""
    await ensure_namespace(client, namespace)
    await client.apply(kres.SERVICE_ACCOUNT.new(service_account, namespace), field_manager=TEST_FIELD_MANAGER)
    role: dict[str, Any] = CLUSTER_ROLE.new("pko-testing-workspace-rpc", rules=[
        {"apiGroups": ["auto.pulumi.com"], "resources": ["workspaces/rpc"], "verbs": ["use"]},
    ])
    await client.apply(role, field_manager=TEST_FIELD_MANAGER)
    binding: dict[str, Any] = CLUSTER_ROLE_BINDING.new(
        "pko-testing-workspace-rpc",
        roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "pko-testing-workspace-rpc"},
        subjects=[{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    )
    await client.apply(binding, field_manager=TEST_FIELD_MANAGER)


class Operator:
    """The operator's manager and controllers running in this process (leader election off).

    `runtime` is the workspace runtime: `local` (agents as child processes) or `pod` (StatefulSets only; their pods
    need a kubelet to ever run). `namespace` limits the operator to one namespace (None: cluster-wide), so a test
    never picks up objects earlier tests left behind (without kube-controller-manager a deleted namespace keeps
    its contents). `agent_kubeconfig` is what local agents use for their TokenReviews (default: `kubeconfig`);
    `workspace_agent` another agent executable for them (the Go reference's, in the interop tier);
    `workspace_idle_timeout` the operator-wide scale-to-zero default (seconds; 0: never); `git_timeout` how long a
    git server may stay silent (``--git-timeout``); `max_active_workspaces` the pool of active workspaces (None: no
    bound); `user_agent` what its requests say they come from (a benchmark counts them in the audit log)."""

    def __init__(self, kubeconfig: Path, workspace_root: Path, *, max_operations: int = 200, workers: int = 25,
                 agent_kubeconfig: Path | None = None, metrics_address: str = "0",
                 runtime: operator_settings.Runtime = "local", namespace: str | None = None,
                 workspace_agent: str | None = None, workspace_idle_timeout: float = 0.0,
                 git_timeout: float | None = None, max_active_workspaces: int | None = None,
                 user_agent: str | None = None, program_fs_addr: str = "127.0.0.1:0",
                 agent_image_volume: bool = False) -> None:
        self.kubeconfig = kubeconfig
        self.metrics_address = metrics_address
        self.client = kclient.Client.from_kubeconfig(kubeconfig, user_agent=user_agent)
        self.manager = manager.Manager(self.client, namespace=namespace, health_address="0",
                                       metrics_address=metrics_address, registry=_fresh_registry())
        self.settings = operator_settings.from_environment(
            version="v0.0.0-test", workspace_runtime=runtime, workspace_root=workspace_root,
            kubeconfig=str(agent_kubeconfig or kubeconfig), workers=workers, max_operations=max_operations,
            program_fs_addr=program_fs_addr, workspace_agent=workspace_agent,
            workspace_idle_timeout=workspace_idle_timeout, max_active_workspaces=max_active_workspaces,
            agent_image_volume=agent_image_volume,
        )
        if git_timeout is not None:
            self.settings.git_timeout = git_timeout
        self.controllers = wiring.setup(self.manager, self.client, self.settings)
        self.all = self.controllers  # the name earlier callers used
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self.all.run(), name="pko-operator")

    async def stop(self, timeout: float = 120.0) -> None:
        """Cancel the operator and wait for its shutdown; a shutdown still running after `timeout` seconds fails
        with the stack of every task and thread left, so a hang names what it waits for."""
        if self._task is not None:
            self._task.cancel()
            done, _ = await asyncio.wait({self._task}, timeout=timeout)
            if not done:
                raise AssertionError(f"the operator did not stop within {timeout:.0f}s; still running:\n"
                                     + pending_work())
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.client.close()


def pending_work() -> str:
    """The stacks of this loop's other tasks and of this process's other threads."""
    out = io.StringIO()
    current = asyncio.current_task()
    for task in asyncio.all_tasks():
        if task is not current:
            task.print_stack(file=out)
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        if ident != threading.get_ident():
            out.write(f"thread {names.get(ident, ident)}:\n{''.join(traceback.format_stack(frame))}")
    return out.getvalue()


@contextlib.asynccontextmanager
async def running(kubeconfig: Path, workspace_root: Path, **options: Any) -> AsyncIterator[Operator]:
    operator = Operator(kubeconfig, workspace_root, **options)
    await operator.start()
    try:
        yield operator
    finally:
        await operator.stop()


def _fresh_registry() -> Any:
    from prometheus_client import CollectorRegistry

    return CollectorRegistry()
