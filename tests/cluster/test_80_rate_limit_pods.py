"""A fleet of Stacks on the `pod` runtime with the operator's API request rate bounded low (the chart's
`kubeAPI.qps`/`kubeAPI.burst`, i.e. ``--kube-api-qps``/``--kube-api-burst``) and a pool of active workspaces smaller
than the fleet (the chart's `controller.maxActiveWorkspaces`): every Stack's workspace pod starts and its Stack
converges, the operator never gets a 429, its request count stays within the token bucket's bound, the limit really
paced it (requests waited for tokens), every work queue drains; and never more workspace pods ran than the pool
allows, some Stacks were queued, and idle workspaces slept to give their slots back. The figures are printed (they
go into docs/performance.md). The same upgrade turns on `controller.workspaceAgentImageVolume`: every workspace pod
of the fleet mounts the operator's image and runs the agent from it, with no `bootstrap` container copying it, so
the fleet converges only if the agent runs from the image volume.

All in one test because each needs the shared operator upgraded (a new operator pod, twice): the pool's own
test on a real control plane is tests/e2e/test_workspace_pool.py (`local` runtime); this one is where its slots are
pods. `make test` runs 6 Stacks in a pool of 3; ``make soak`` (``PKO_SOAK=1``) runs 50 in a pool of 20.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pko.kube import client as kclient
from pko.kube import objects, resources
from pko.testing import cluster, crossrun
from pko.testing.clusterbed import (
    OPERATOR_NAMESPACE,
    Release,
    diagnose,
    passphrase_env,
    upgrade_pko,
    workspace_template,
)
from pko.testing.waiting import condition, eventually

STACKS = 50 if os.environ.get("PKO_SOAK") else 6
POOL = 20 if os.environ.get("PKO_SOAK") else 3
QPS, BURST = 5, 6
WORKSPACE_PODS = "auto.pulumi.com/component=workspace"


def _totals(real_cluster: cluster.Cluster) -> dict[str, float]:
    """Each sample name of the operator's /metrics, summed over its labels."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(crossrun.scrape(real_cluster, OPERATOR_NAMESPACE)):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


@pytest.fixture
def rate_limited(real_cluster: cluster.Cluster, operator_release: Release) -> Iterator[None]:
    """The shared operator upgraded to the low limits, the pool and the agent from an image volume (a new operator
    pod); restored afterwards."""
    upgrade_pko(real_cluster, operator_release, f"kubeAPI.qps={QPS}", f"kubeAPI.burst={BURST}",
                f"controller.maxActiveWorkspaces={POOL}", "controller.workspaceAgentImageVolume=true")
    yield
    upgrade_pko(real_cluster, operator_release, "kubeAPI.qps=", "kubeAPI.burst=", "controller.maxActiveWorkspaces=",
                "controller.workspaceAgentImageVolume=")


def _ready(obj: dict[str, Any]) -> bool:
    status = obj.get("status") or {}
    return (condition(obj, "Ready").get("status") == "True"
            and status.get("observedGeneration") == obj["metadata"]["generation"]
            and (status.get("outputs") or {}).get("name") == obj["metadata"]["name"])


def _agent_delivery(pod: dict[str, Any]) -> tuple[tuple[str, ...], str, tuple[str, ...]]:
    """A workspace pod's init containers, the executable its `pulumi` container starts, and its image volumes."""
    spec = pod["spec"]
    pulumi = next(c for c in spec["containers"] if c["name"] == "pulumi")
    return (tuple(c["name"] for c in spec.get("initContainers", [])), pulumi["command"][1],
            tuple(v["image"]["reference"] for v in spec.get("volumes", []) if "image" in v))


async def test_a_fleet_of_workspace_pods_running_the_agent_from_its_image_converges_under_a_low_qps_within_a_pool(
    ckc: kclient.Client, cnamespace: str, real_cluster: cluster.Cluster, rate_limited: None
) -> None:
    ns = cnamespace
    most_pods = [0]
    deliveries: set[tuple[tuple[str, ...], str, tuple[str, ...]]] = set()

    async def count_pods() -> None:  # the whole time the fleet converges: a pod still terminating counts (it is on
        while True:                  # the node; the pool gives its slot back once it is gone)
            pods = (await ckc.list(resources.POD, ns, selector=WORKSPACE_PODS)).items
            most_pods[0] = max(most_pods[0], len(pods))
            deliveries.update(_agent_delivery(pod) for pod in pods)
            await asyncio.sleep(0.5)
    counting = asyncio.create_task(count_pods())
    started = time.monotonic()
    for index in range(STACKS):
        name = f"q{index:02d}"
        await ckc.create(resources.PROGRAM.new(name, ns, program={
            "configuration": {"name": {"type": "String"}}, "outputs": {"name": "${name}"}}))
        await ckc.create(resources.STACK.new(name, ns, spec={
            "stack": "dev", "programRef": {"name": name}, "backend": "file:///share", "envRefs": passphrase_env(),
            "config": {"name": name},
            # a small CPU request, so that 50 workspace pods fit on the 2-core node
            "workspaceTemplate": workspace_template(resources={"requests": {"cpu": "10m", "memory": "48Mi"}})}))

    async def converged() -> bool:
        return sum(1 for o in (await ckc.list(resources.STACK, ns)).items if _ready(o)) == STACKS

    try:
        await eventually(converged, f"{STACKS} Stacks Ready", 120 + STACKS * 20, interval=1.0)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{diagnose(real_cluster, ns)}") from None
    finally:
        counting.cancel()
    converged_after = time.monotonic() - started
    reasons = {str(e.get("reason")) for e in (await ckc.list(resources.EVENT, ns)).items}
    print(f"{STACKS} Stacks in a pool of {POOL}: at most {most_pods[0]} workspace pods at once; "
          f"events {sorted(reasons)}")
    assert 0 < most_pods[0] <= POOL, f"{most_pods[0]} workspace pods ran at once in a pool of {POOL}"
    assert "StackQueued" in reasons, "no Stack waited for a slot: the test did not exercise the pool"
    assert "Sleeping" in reasons, "no idle workspace gave its slot back"
    operator_image = crossrun.agent_image(real_cluster, OPERATOR_NAMESPACE)
    assert deliveries == {(("fetch",), "/pko-agent/agent", (operator_image,))}, (
        f"workspace pods should mount the operator's image {operator_image} and copy no agent: {deliveries}")

    def drained() -> bool:
        totals = _totals(real_cluster)
        return totals.get("workqueue_depth", 1) == 0 and totals.get("controller_runtime_active_workers", 1) == 0

    await eventually(drained, "every work queue drained", 180, interval=1.0)
    totals = _totals(real_cluster)
    elapsed = time.time() - totals["process_start_time_seconds"]  # the operator's whole life, all under the limit
    requests = totals.get("pko_kube_api_rate_limited_requests_total", 0.0)
    waited = totals.get("pko_kube_api_rate_limit_wait_seconds_total", 0.0)
    print(f"{STACKS} Stacks on pods under qps={QPS} burst={BURST}: all Ready in {converged_after:.0f}s; "
          f"{requests:.0f} API requests ({requests / elapsed:.2f}/s over the operator's {elapsed:.0f}s), "
          f"{waited:.0f}s waited for tokens")
    assert requests > STACKS * 3, "the limiter saw too few requests: it is not on the operator's client"
    assert requests <= QPS * elapsed + BURST, f"{requests} requests in {elapsed:.0f}s exceed {QPS}/s + {BURST}"
    assert waited > 0, "the limit never paced a request: the test did not exercise it"
    pods = [p for p in (await ckc.list(resources.POD, OPERATOR_NAMESPACE)).items
            if not p["metadata"].get("deletionTimestamp")]
    log = "".join(real_cluster.kubectl("logs", "-n", OPERATOR_NAMESPACE, objects.name_of(p), "-c", "manager").stdout
                  for p in pods)
    for sign in (" 429 ", "TooManyRequests", "Too Many Requests"):
        assert sign not in log, f"the operator met {sign.strip()!r} under its own limit"
    restarts = [s.get("restartCount", 0) for p in pods for s in p["status"].get("containerStatuses", [])]
    assert restarts, "no operator container"
    assert not any(restarts), f"the operator restarted under load: {restarts}"

    # Leave the node as found for the next tests: the Stacks (no destroyOnFinalize) and their pods go.
    for index in range(STACKS):
        await ckc.delete(resources.STACK, f"q{index:02d}", ns)

    async def pods_gone() -> bool:
        return not (await ckc.list(resources.POD, ns)).items and not (await ckc.list(resources.STACK, ns)).items

    await eventually(pods_gone, "the fleet's Stacks and workspace pods gone", 300, interval=1.0)
