"""A Stack never runs two Updates at once: a reconcile that arrives while its Update is in flight (here, a sync
request) waits for that Update to finish, and is honoured by the next one."""

from __future__ import annotations

from pathlib import Path

from pko.api import names
from pko.kube import client as kclient
from pko.kube import objects, resources
from pko.testing import gitserver, operator
from pko.testing.waiting import condition, reconciles, settled, wait_for

SLOW_PROGRAM = """import time

import pulumi

time.sleep(8)
pulumi.export("done", True)
"""


async def test_a_request_during_an_update_waits_for_it(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator, tmp_path: Path,
) -> None:
    repo = f"slow-{namespace}"
    commit = git.create_repo(repo, {"Pulumi.yaml": "name: slow\nruntime: python\n", "__main__.py": SLOW_PROGRAM})
    backend = tmp_path / "state"
    backend.mkdir()
    await kc.create(resources.STACK.new("slow", namespace, spec={
        "stack": "dev", "projectRepo": git.http_url(repo), "commit": commit, "backend": f"file://{backend}",
        "envRefs": {"PULUMI_CONFIG_PASSPHRASE": {"type": "Literal", "literal": {"value": "inflight"}}},
    }))
    running = await wait_for(kc, resources.STACK, "slow", namespace,
                             lambda o: bool((o.get("status") or {}).get("currentUpdate")), timeout=240)
    first = running["status"]["currentUpdate"]["name"]

    registry = stack_operator.manager.registry
    before = reconciles(registry, names.STACK_CONTROLLER)
    await kc.patch(resources.STACK, "slow", {"metadata": {"annotations": {
        "pulumi.com/reconciliation-request": "while-running"}}}, namespace)
    # The operator saw the request (it records it at once) and finished that reconcile: had it started a second
    # Update, it would be there now.
    seen = await wait_for(kc, resources.STACK, "slow", namespace,
                          lambda o: (o.get("status") or {}).get("observedReconcileRequest") == "while-running",
                          timeout=60, interval=0.1)
    assert (seen["status"].get("currentUpdate") or {}).get("name") == first, "the Update finished too soon"
    await settled(registry, names.STACK_CONTROLLER, after=before)
    updates = (await kc.list(resources.UPDATE, namespace)).items
    in_flight = [u for u in updates if condition(u, "Complete").get("status") != "True"]
    assert [objects.name_of(u) for u in in_flight] == [first], "a second Update started while one was running"

    done = await wait_for(kc, resources.STACK, "slow", namespace, lambda o: (
        condition(o, "Ready").get("status") == "True"
        and ((o.get("status") or {}).get("lastUpdate") or {}).get("reconcileRequest") == "while-running"),
        timeout=300)
    assert done["status"]["lastUpdate"]["name"] != first
    assert done["status"]["outputs"] == {"done": True}
