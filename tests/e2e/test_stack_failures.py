"""A failing program, end to end: the Stack retries after a backoff (capped by `retryMaxBackoffDurationSeconds`,
small here so the test is quick), counting failures, and stalls with `UpdateFailed` after three; it then stays
put until its source changes, and a fix pushed to its branch deploys. `/metrics`, fetched over HTTP, follows:
`stacks_active` and `stacks_failing{namespace,name}`."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import httpx
import stack_e2e as e2e
from prometheus_client import parser

from pko.api import names
from pko.kube import client as kclient
from pko.kube import objects, resources
from pko.testing import gitserver, operator, waiting

BACKOFF_CAP = 2


async def _metrics(op: operator.Operator) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"http://{op.metrics_address}/metrics", timeout=10)
    response.raise_for_status()
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in parser.text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name in ("stacks_active", "stacks_failing"):
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _failing(namespace: str, name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return ("stacks_failing", (("name", name), ("namespace", namespace)))


ACTIVE = ("stacks_active", ())


async def _wait_metrics(op: operator.Operator, expected: dict[Any, float], timeout: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    found: dict[Any, float] = {}
    while asyncio.get_running_loop().time() < deadline:
        found = await _metrics(op)
        if all(found.get(k) == v for k, v in expected.items()):
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"metrics never showed {expected}; last: {found}")


async def test_failing_stack_retries_stalls_and_recovers_on_a_fix(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
) -> None:
    repo, steady_repo = f"flaky-{namespace}", f"steady-{namespace}"
    broken = e2e.create_repo(git, repo, failing=True)
    steady_commit = e2e.create_repo(git, steady_repo)
    await kc.create(e2e.git_stack("flaky", namespace, git.http_url(repo), branch="main",
                                  retryMaxBackoffDurationSeconds=BACKOFF_CAP))
    await kc.create(e2e.git_stack("steady", namespace, git.http_url(steady_repo), commit=steady_commit))

    # Record every failure as it goes by: the counter, the condition, the time it was recorded.
    failures: dict[int, dict[str, Any]] = {}

    def record(obj: dict[str, Any]) -> None:
        last = e2e.last_update(obj)
        if last.get("state") == "failed" and "currentUpdate" not in obj["status"]:
            failures.setdefault(int(last.get("failures", 0)), {"last": last, "conditions": obj["status"]["conditions"]})

    stalled = await e2e.wait_for(kc, resources.STACK, "flaky", namespace,
                                 lambda o: e2e.reason(o, "Stalled") is not None, seen=record)
    assert e2e.condition(stalled, "Stalled")["reason"] == "UpdateFailed", stalled["status"]
    assert e2e.condition(stalled, "Stalled")["message"] == (
        "up failed 3 times; not retrying until the spec or source changes")
    assert e2e.condition(stalled, "Ready")["reason"] == "NotReadyStalled"
    last = e2e.last_update(stalled)
    assert last["state"] == "failed"
    assert last["failures"] == 3
    assert last["type"] == "up"
    assert last["lastAttemptedCommit"] == broken
    assert "lastSuccessfulCommit" not in last or not last["lastSuccessfulCommit"]
    assert "the program refuses to run: boom" in last["message"]

    # Each failure was first reported as Reconciling/RetryingAfterFailure with the count so far (polling sees
    # each one for at least the backoff; a very slow machine may miss one, never all of them).
    assert 3 in failures
    assert len(failures) >= 3, sorted(failures)
    for count in sorted(set(failures) - {3}):
        reconciling = next(c for c in failures[count]["conditions"] if c["type"] == "Reconciling")
        assert reconciling["reason"] == "RetryingAfterFailure"
        assert reconciling["message"] == f"{count} update failure(s)"
    updates = await e2e.updates_of(kc, "flaky", namespace)
    assert len(updates) == 4
    assert [u["spec"]["message"] for u in updates] == ["Initial stack update"] + [
        f"Backoff time elapsed: {BACKOFF_CAP}s"] * 3
    # Every retry waited out its cooldown (min(10s·3ⁿ, cap)) after the failure before it.
    for count in sorted(c for c in failures if c + 1 in failures):
        failed_at = e2e.timestamp(failures[count]["last"]["lastResyncTime"])
        retry = next(u for u in updates if u["metadata"]["name"] == failures[count + 1]["last"]["name"])
        wait = min(10 * 3 ** count, BACKOFF_CAP)
        assert e2e.timestamp(retry["metadata"]["creationTimestamp"]) >= failed_at + datetime.timedelta(
            seconds=wait - 1)
    events = await e2e.events_of(kc, "flaky", namespace)
    # told four times: one Event object for each message, its count saying how often (as client-go's recorder)
    assert sum(e.get("count", 1) for e in events if e["reason"] == "StackUpdateFailure" and e["type"] == "Warning") == 4
    assert all("boom" in e["message"] for e in events if e["reason"] == "StackUpdateFailure")

    # /metrics over HTTP: two Stacks, the failing one flagged.
    await e2e.wait_for(kc, resources.STACK, "steady", namespace, e2e.is_ready)
    await _wait_metrics(stack_operator, {ACTIVE: 2, _failing(namespace, "flaky"): 1,
                                         _failing(namespace, "steady"): 0})

    # Stalled means no more retries: once the controller is done with the Stack, the only look it has scheduled
    # is the branch poll (a minute away), not a retry after the backoff (a retry already run would be a fifth
    # Update).
    controller = stack_operator.controllers.stacks.controller
    flaky = objects.ObjectKey(namespace, "flaky")
    await waiting.eventually(
        lambda: waiting.idle(stack_operator.manager.registry, names.STACK_CONTROLLER)
        and not controller.queue.is_processing(flaky), "the stack controller to be done with the stalled Stack")
    after = waiting.next_look(controller, flaky)
    assert after is None or after > 3 * BACKOFF_CAP, f"a retry is scheduled in {after:.1f}s"
    assert len(await e2e.updates_of(kc, "flaky", namespace)) == 4

    # A fix pushed to the branch deploys (a reconciliation request makes the Stack look now, not at its poll).
    fixed = git.commit(repo, e2e.program_files(marker="fixed"), message="fix")
    await e2e.request_reconcile(kc, "flaky", namespace, "after-fix")
    stack = await e2e.wait_for(kc, resources.STACK, "flaky", namespace, e2e.is_ready)
    last = e2e.last_update(stack)
    assert last["state"] == "succeeded"
    assert last.get("failures", 0) == 0
    assert last["lastSuccessfulCommit"] == last["lastAttemptedCommit"] == fixed
    assert stack["status"]["outputs"]["marker"] == "fixed"
    assert not e2e.condition(stack, "Stalled")
    await _wait_metrics(stack_operator, {ACTIVE: 2, _failing(namespace, "flaky"): 0})

    # A deleted Stack leaves the metrics.
    await kc.delete(resources.STACK, "steady", namespace)
    await e2e.wait_gone(kc, resources.STACK, "steady", namespace)
    await _wait_metrics(stack_operator, {ACTIVE: 1})
    assert _failing(namespace, "steady") not in await _metrics(stack_operator)
