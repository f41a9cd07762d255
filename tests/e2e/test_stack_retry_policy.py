"""A per-Stack failure policy (pko's `spec.retryPolicy`), end to end.

A Stack with `maxFailures: 0` and a short `stalledRetryIntervalSeconds` stalls at its first failed Update, is
retried automatically after the interval while the fault lasts (staying Stalled, counting failures), and recovers
by itself, with no change to its spec or source, once the fault is gone — the transient-outage case of PKO#1294.
A Stack with its own backoff (`backoffBaseSeconds`, `backoffFactor`) and `maxFailures: 1` retries once after that
backoff, then stalls for good (no stalled retry: the Go operator's behaviour)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import stack_e2e as e2e

from pko.api import names
from pko.kube import client as kclient
from pko.kube import objects, resources
from pko.testing import gitserver, operator, waiting

# Fails while the file named by config `outage` exists: a dependency that is down, then back.
OUTAGE_PROGRAM = '''import os

import pulumi

outage = pulumi.Config().require("outage")
if os.path.exists(outage):
    raise RuntimeError("the service is down: boom")
pulumi.export("recovered", True)
'''
INTERVAL = 3


def _stalled(obj: dict[str, Any]) -> bool:
    return e2e.reason(obj, "Stalled") == "UpdateFailed" and "currentUpdate" not in (obj.get("status") or {})


async def test_a_stalled_stack_is_retried_and_recovers_when_the_fault_is_gone(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    tmp_path: Path,
) -> None:
    outage = tmp_path / "outage"
    outage.write_text("down")
    repo = f"outage-{namespace}"
    commit = git.create_repo(repo, {e2e.PROJECT: e2e.PROJECT_YAML, "__main__.py": OUTAGE_PROGRAM})
    await kc.create(e2e.git_stack("fragile", namespace, git.http_url(repo), commit=commit,
                                  config={"outage": str(outage)},
                                  retryPolicy={"maxFailures": 0, "stalledRetryIntervalSeconds": INTERVAL}))

    # Stalled at the first failure: no backoff retry.
    stack = await e2e.wait_for(kc, resources.STACK, "fragile", namespace, _stalled)
    assert e2e.condition(stack, "Stalled")["message"] == (
        f"up failed once; retrying {INTERVAL}s after the last failure, or when the spec or source changes")
    assert e2e.condition(stack, "Ready")["reason"] == "NotReadyStalled"
    first_failure = e2e.last_update(stack)
    assert first_failure.get("failures", 0) == 0
    assert "the service is down: boom" in first_failure["message"]

    # Retried after the interval, still failing: Stalled, one more failure counted.
    stack = await e2e.wait_for(kc, resources.STACK, "fragile", namespace,
                               lambda o: _stalled(o) and e2e.last_update(o).get("failures") == 1)
    assert e2e.condition(stack, "Stalled")["message"].startswith("up failed 1 times; retrying 3s")
    updates = await e2e.updates_of(kc, "fragile", namespace)
    assert [u["spec"]["message"] for u in updates] == ["Initial stack update", f"Stalled retry interval elapsed: "
                                                       f"{INTERVAL}s"]
    retry_created = e2e.timestamp(updates[1]["metadata"]["creationTimestamp"])
    assert retry_created >= e2e.timestamp(first_failure["lastResyncTime"]) + datetime.timedelta(
        seconds=INTERVAL - 1)

    # The fault goes away; the next stalled retry succeeds with no change to the Stack.
    generation = stack["metadata"]["generation"]
    outage.unlink()
    stack = await e2e.wait_for(kc, resources.STACK, "fragile", namespace, e2e.is_ready)
    assert stack["metadata"]["generation"] == generation
    assert stack["status"]["outputs"] == {"recovered": True}
    last = e2e.last_update(stack)
    assert last["state"] == "succeeded"
    assert last.get("failures", 0) == 0
    assert not e2e.condition(stack, "Stalled")
    messages = [u["spec"]["message"] for u in await e2e.updates_of(kc, "fragile", namespace)]
    assert messages[0] == "Initial stack update"
    assert set(messages[1:]) == {f"Stalled retry interval elapsed: {INTERVAL}s"}


async def test_a_stacks_own_backoff_and_limit(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
) -> None:
    repo = f"limited-{namespace}"
    broken = e2e.create_repo(git, repo, failing=True)
    await kc.create(e2e.git_stack("limited", namespace, git.http_url(repo), commit=broken, retryPolicy={
        "maxFailures": 1, "backoffBaseSeconds": 2, "backoffFactor": 1}))

    stack = await e2e.wait_for(kc, resources.STACK, "limited", namespace, _stalled)
    assert e2e.condition(stack, "Stalled")["message"] == (
        "up failed 1 times; not retrying until the spec or source changes")
    assert e2e.last_update(stack)["failures"] == 1
    updates = await e2e.updates_of(kc, "limited", namespace)
    assert [u["spec"]["message"] for u in updates] == ["Initial stack update", "Backoff time elapsed: 2s"]

    # Stalled for good: once the controller is done, it has no look of its own scheduled, and no Update follows.
    controller = stack_operator.controllers.stacks.controller
    key = objects.ObjectKey(namespace, "limited")
    await waiting.eventually(
        lambda: waiting.idle(stack_operator.manager.registry, names.STACK_CONTROLLER)
        and not controller.queue.is_processing(key), "the stack controller to be done with the stalled Stack")
    assert waiting.next_look(controller, key) is None
    assert len(await e2e.updates_of(kc, "limited", namespace)) == 2
