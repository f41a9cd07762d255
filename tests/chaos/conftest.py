"""Fixtures of the chaos tier: a control plane of its own (its API server and etcd get restarted, which no other
tier's tests should see), and `pko operator` processes that tests kill and restart.

Every operator here is cluster-wide, so each test gets a fresh namespace that is emptied afterwards (finalizers
and all), and every operator process a test started is gone when it ends, SIGKILLed if need be, together with
any process that still carries the test's run marker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import lightkube
import pytest

from pko.kube import client as kclient
from pko.kube import errors, resources
from pko.testing import controlplane, operator

from . import chaos


@pytest.fixture(scope="session")
def chaos_plane(testbed_dir: Path) -> Iterator[controlplane.ControlPlane]:
    """etcd + kube-apiserver for the chaos tier alone, with our CRDs and the operator's identity."""
    try:
        cp = controlplane.start(testbed_dir / "chaos")
    except Exception as err:  # a broken test bed must fail the tests, never skip them
        pytest.fail(f"could not start the control plane: {err}", pytrace=False)
    with cp:
        yield cp


@pytest.fixture
async def ckc(chaos_plane: controlplane.ControlPlane) -> AsyncIterator[kclient.Client]:
    async with kclient.Client.connect(lightkube.KubeConfig.from_file(str(chaos_plane.kubeconfig))) as client:
        await operator.install_crds(client)
        await operator.install_identity(client)
        yield client


@pytest.fixture
async def cns(ckc: kclient.Client) -> AsyncIterator[str]:
    name = f"chaos-{uuid.uuid4().hex[:8]}"
    await ckc.create(resources.NAMESPACE.new(name))
    yield name
    for kind in (resources.STACK, resources.UPDATE, resources.WORKSPACE, resources.PROGRAM):
        with contextlib.suppress(errors.ApiError):
            for obj in (await ckc.list(kind, name)).items:
                obj_name = obj["metadata"]["name"]
                with contextlib.suppress(errors.NotFound):
                    if obj["metadata"].get("finalizers"):
                        await ckc.patch(kind, obj_name, {"metadata": {"finalizers": None}}, name)
                    await ckc.delete(kind, obj_name, name, missing_ok=True)
    await ckc.delete(resources.NAMESPACE, name, missing_ok=True)


@pytest.fixture
def operators(chaos_plane: controlplane.ControlPlane, tmp_path: Path, pulumi_env: dict[str, str]
              ) -> Iterator[Callable[..., chaos.OperatorProcess]]:
    """A factory of operator processes sharing one run marker (`factory.run`); all stopped at the end."""
    env = chaos.run_env(pulumi_env)
    made: list[chaos.OperatorProcess] = []

    def factory(*flags: str, name: str = "operator") -> chaos.OperatorProcess:
        process = chaos.OperatorProcess(chaos_plane.kubeconfig, tmp_path, env, list(flags), name=name)
        made.append(process)
        return process

    factory.run = env[chaos.RUN_ENV]  # type: ignore[attr-defined]
    yield factory
    for process in made:
        if process.alive():
            process.kill()
    for pid in chaos.marked(env[chaos.RUN_ENV]):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
