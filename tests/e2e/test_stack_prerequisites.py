"""Prerequisites, end to end: a Stack waits for its prerequisite (Reconciling/PrerequisiteNotSatisfied), starts
when the prerequisite succeeds, and re-requests a prerequisite whose success is older than
`succeededWithinDuration` through the reconciliation-request annotation (`after-<its last update>`). The Stack
controller's clock is moved past the window rather than waited out."""

from __future__ import annotations

import datetime

import stack_e2e as e2e

from pko.api import names
from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import gitserver, operator

WINDOW = 10  # seconds: the freshness the dependent requires in the second half (its fresh run must fit in it)


def _prerequisite(name: str, within: str) -> dict[str, object]:
    return {"name": name, "requirement": {"succeededWithinDuration": within}}


async def test_dependent_waits_for_and_refreshes_its_prerequisite(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
) -> None:
    repo = f"prereq-{namespace}"
    commit = e2e.create_repo(git, repo)
    url = git.http_url(repo)
    await kc.create(e2e.git_stack("dependent", namespace, url, commit=commit,
                                  prerequisites=[_prerequisite("base", "1h")]))
    await kc.create(e2e.git_stack("orphan", namespace, url, commit=commit,
                                  prerequisites=[{"name": "ghost-1"}, {"name": "ghost-2"}]))

    # Without its prerequisite the dependent waits, and creates nothing.
    waiting = await e2e.wait_for(kc, resources.STACK, "dependent", namespace,
                                 lambda o: e2e.reason(o, "Reconciling") == "PrerequisiteNotSatisfied", timeout=60)
    assert e2e.condition(waiting, "Reconciling")["message"] == (
        'unable to fetch prerequisite "base": stacks.pulumi.com "base" not found')
    assert e2e.condition(waiting, "Ready")["status"] == "False"
    orphan = await e2e.wait_for(kc, resources.STACK, "orphan", namespace,
                                lambda o: e2e.reason(o, "Reconciling") == "PrerequisiteNotSatisfied", timeout=60)
    assert e2e.condition(orphan, "Reconciling")["message"] == (
        "multiple prerequisites were not satisfied ghost-1, ghost-2")
    assert await e2e.updates_of(kc, "dependent", namespace) == []
    assert await kc.get_or_none(resources.WORKSPACE, "dependent", namespace) is None

    # The prerequisite appears and succeeds: that alone starts the dependent.
    await kc.create(e2e.git_stack("base", namespace, url, commit=commit))
    await e2e.wait_for(kc, resources.STACK, "dependent", namespace, e2e.is_ready)
    base = await kc.get(resources.STACK, "base", namespace)
    base_first = e2e.last_update(base)
    assert base_first["state"] == "succeeded"
    (dependent_update,) = await e2e.updates_of(kc, "dependent", namespace)
    assert e2e.timestamp(dependent_update["metadata"]["creationTimestamp"]) >= e2e.timestamp(
        base_first["lastResyncTime"]), "the dependent ran only after its prerequisite succeeded"
    assert names.ANNOTATION_RECONCILE_REQUEST not in (base["metadata"].get("annotations") or {})

    # Now require a fresher prerequisite than `base` is: the dependent asks `base` to run again. To the Stack
    # controller, `base` succeeded more than the window ago (its clock runs ahead from here on).
    ahead = datetime.timedelta(seconds=WINDOW + 2)
    stack_operator.controllers.stacks.reconciler.clock = lambda: datetime.datetime.now(datetime.UTC) + ahead
    await kc.patch(resources.STACK, "dependent",
                   {"spec": {"prerequisites": [_prerequisite("base", f"{WINDOW}s")]}}, namespace)
    request = f"after-{base_first['name']}"
    base = await e2e.wait_for(kc, resources.STACK, "base", namespace,
                              lambda o: e2e.last_update(o).get("reconcileRequest") == request and e2e.is_ready(o))
    managers = {m["manager"] for m in base["metadata"]["managedFields"]}
    assert names.FIELD_MANAGER_PREREQUISITE_REQUEST in managers
    base_updates = await e2e.updates_of(kc, "base", namespace)
    assert [u["spec"]["message"] for u in base_updates][:2] == ["Initial stack update", f'Sync request: "{request}"']

    await e2e.wait_for(kc, resources.STACK, "dependent", namespace,
                       lambda o: e2e.is_ready(o) and e2e.last_update(o)["generation"] == 2)
    dependent_updates = await e2e.updates_of(kc, "dependent", namespace)
    assert dependent_updates[-1]["spec"]["message"] == "New stack generation: 2"
    assert e2e.timestamp(dependent_updates[-1]["metadata"]["creationTimestamp"]) >= e2e.timestamp(
        base_updates[1]["status"]["endTime"]) - datetime.timedelta(seconds=1), \
        "the dependent ran after its prerequisite's fresh run"
    events = await e2e.events_of(kc, "dependent", namespace)
    assert any(e["reason"] == "StackUpdateDetected" and e["message"] == "New stack generation: 2" for e in events)
