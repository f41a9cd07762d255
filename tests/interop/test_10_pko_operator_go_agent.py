"""pko's operator with the Go reference agent in its workspace pods: pko installed by its Helm chart, its
`AGENT_IMAGE` pointed at the Go operator's image, so the `bootstrap` init container copies the Go `/agent` and
`/tini` and pko's operator drives the Go agent over the shared protocol. Three scenarios side by side: a Program
Stack through a config change and destroy, a Git Python Stack, and an Update written by hand."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from pko.kube import client as kclient
from pko.testing import cluster, crossrun, gitserver
from pko.testing.clusterbed import OPERATOR_NAMESPACE, Release, install_pko, uninstall


@pytest.fixture(scope="module")
def pko_with_go_agent(real_cluster: cluster.Cluster) -> Iterator[Release]:
    release = install_pko(real_cluster, "controller.metricsSecure=false")
    crossrun.set_agent_image(real_cluster, OPERATOR_NAMESPACE, crossrun.GO_IMAGE)
    yield release
    uninstall(real_cluster, release)


async def test_pko_operator_drives_the_go_agent(
    ckc: kclient.Client, real_cluster: cluster.Cluster, pod_git: gitserver.GitServer,
    new_ns: Callable[[str], Awaitable[str]], pko_with_go_agent: Release, observed: dict[tuple[str, str], Any],
) -> None:
    program_ns, python_ns, update_ns = await new_ns("pg"), await new_ns("pp"), await new_ns("pu")
    program, python, update = await asyncio.gather(
        crossrun.program_stack(ckc, real_cluster, program_ns, agent_image=crossrun.GO_IMAGE),
        crossrun.python_git_stack(ckc, real_cluster, python_ns, pod_git, agent_image=crossrun.GO_IMAGE),
        crossrun.handwritten_update(ckc, real_cluster, update_ns, pod_git),
    )
    observed["pko", "program"], observed["pko", "python"], observed["pko", "update"] = program, python, update
    observed["pko", "metrics"] = crossrun.metric_families(real_cluster, OPERATOR_NAMESPACE)
    assert update.secret["data"] == {"answer": 42, "token": "s3cr3t"}
