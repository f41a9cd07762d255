"""Fixtures of the interop tier: the real cluster of `pko.testing.clusterbed` (the run's one cluster: the cluster
tier's, handed over empty when that tier runs too), the Go reference operator's image beside pko's, and a record of
what each operator showed, for the parity checks.

Files run in name order: `test_01_*` needs no cluster (the `local` runtime with the Go agent), then pko's operator
with the Go agent, the Go operator with pko's agent, the migration between them and the benchmark's smoke run.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from pko.kube import client as kclient
from pko.kube import errors, resources
from pko.testing import cluster
from pko.testing.clusterbed import built_images, ckc, new_namespace, pod_git, real_cluster

__all__ = ["built_images", "ckc", "pod_git", "real_cluster"]


@pytest.fixture(scope="package")
def observed() -> dict[tuple[str, str], Any]:
    """(operator, scenario) → what it showed (`pko.testing.crossrun.Observed`), filled by the cross-runs."""
    return {}


@pytest.fixture
async def new_ns(ckc: kclient.Client, real_cluster: cluster.Cluster
                 ) -> AsyncIterator[Callable[[str], Awaitable[str]]]:
    """Make fresh namespaces set up for Stacks (`await new_ns("prefix")`), one per scenario a test runs side by
    side; their Stacks are deleted (and destroyed) and the namespaces removed afterwards."""
    made: list[str] = []

    async def make(prefix: str) -> str:
        made.append(await new_namespace(ckc, real_cluster, prefix))
        return made[-1]

    yield make
    for name in made:
        for stack in (await ckc.list(resources.STACK, name)).items:
            with contextlib.suppress(errors.NotFound):
                await ckc.delete(resources.STACK, stack["metadata"]["name"], name)
        real_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
