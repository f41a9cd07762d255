"""What Argo CD shows for the Stacks pko produces: Argo CD's own health check (`health.lua`, evaluated as Argo does:
`pko.testing.argocd`) over every version of real Stacks the operator wrote, from creation to Ready, through a spec
change, a failure that stalls and a suspension (docs/argocd.md).

Argo CD's sync waves wait for each wave's resources to be Healthy, so the property that matters most is that a Stack
is never Healthy before the update of its current generation has succeeded: otherwise the next wave would start on
stale infrastructure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import stack_e2e as e2e

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import argocd, gitserver, operator

REPO = Path(__file__).resolve().parents[2]


def _never_healthy_early(check: argocd.HealthCheck, seen: list[dict[str, Any]]) -> list[str]:
    """Each status Argo would show, checking that Healthy comes only with a succeeded update of the generation."""
    shown = []
    for obj in seen:
        health = check(obj)
        shown.append(health.status)
        if health.status == "Healthy":
            last = e2e.last_update(obj)
            assert last.get("generation") == obj["metadata"]["generation"], obj["status"]
            assert last.get("state") == "succeeded", obj["status"]
    return shown


async def test_argo_cd_health_over_the_stacks_pko_writes(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
) -> None:
    check = argocd.HealthCheck.load(argocd.check_dir(REPO))
    good, bad = f"argo-good-{namespace}", f"argo-bad-{namespace}"
    commit = e2e.create_repo(git, good)
    e2e.create_repo(git, bad, failing=True)

    seen: list[dict[str, Any]] = []
    await kc.create(e2e.git_stack("app", namespace, git.http_url(good), commit=commit))
    ready = await e2e.wait_for(kc, resources.STACK, "app", namespace, e2e.is_ready, seen=seen.append)
    shown = _never_healthy_early(check, seen)
    assert "Progressing" in shown, shown  # while it was processed
    assert check(ready) == argocd.Health("Healthy", "the stack has been processed and is up to date")

    # A spec change: Progressing (the generation not yet observed, then processing) until the new update succeeded.
    seen.clear()
    await kc.patch(resources.STACK, "app", {"spec": {"config": {"greeting": "changed"}}}, namespace)
    changed = await e2e.wait_for(kc, resources.STACK, "app", namespace,
                                 lambda o: e2e.is_ready(o) and o["metadata"]["generation"] == 2, seen=seen.append)
    shown = _never_healthy_early(check, seen)
    assert "Degraded" not in shown, shown
    assert check(changed).status == "Healthy"

    # Suspended: no new update, Ready kept, so Argo still shows Healthy (docs/argocd.md gives a customisation).
    await kc.patch(resources.STACK, "app", {"spec": {"suspend": True}}, namespace)
    suspended = await e2e.wait_for(kc, resources.STACK, "app", namespace,
                                   lambda o: e2e.reason(o, "Reconciling") is None
                                   and o["status"].get("observedGeneration") == o["metadata"]["generation"]
                                   and any(c["type"] == "Reconciling" and c["reason"] == "Suspended"
                                           for c in o["status"].get("conditions") or []))
    assert check(suspended).status == "Healthy", suspended["status"]

    # A failure the retry policy gives up on at once: Stalled, which Argo shows Degraded with pko's message.
    await kc.create(e2e.git_stack("broken", namespace, git.http_url(bad), branch="main",
                                  retryPolicy={"maxFailures": 0}))
    stalled = await e2e.wait_for(kc, resources.STACK, "broken", namespace,
                                 lambda o: e2e.reason(o, "Stalled") is not None)
    health = check(stalled)
    assert health.status == "Degraded", stalled["status"]
    stalled_condition = next(c for c in stalled["status"]["conditions"] if c["type"] == "Stalled")
    assert health.message == stalled_condition["message"]
