"""Suspend and resume (pko's `spec.suspend`), end to end: an Update in flight when the Stack is suspended finishes
and is reported; while suspended no Update starts, whatever changes (spec, sync request), and the status says so
(`Reconciling=False/Suspended`, `Ready` kept) with a `StackSuspended` event; resuming runs exactly one Update with
the latest spec. Deleting a suspended Stack still runs its finalizer: `destroyOnFinalize` destroys."""

from __future__ import annotations

import datetime
from pathlib import Path

import stack_e2e as e2e

from pko.api import names
from pko.kube import client as kclient
from pko.kube import objects, resources
from pko.testing import gitserver, operator, waiting

# The shared e2e program, held until the test creates the file named by the `release` config value (or for ten
# minutes): the Stack is suspended while its Update is known to run, and the Update ends when the test lets it.
SLOW_PROGRAM = """import os
import time

import pulumi

release = pulumi.Config().require("release")
deadline = time.monotonic() + 600
while not os.path.exists(release) and time.monotonic() < deadline:
    time.sleep(0.1)
""" + e2e.PROGRAM
SUSPENDED_MESSAGE = "the stack is suspended (spec.suspend is true): no new update starts until it is false"


async def _suspend(kc: kclient.Client, name: str, namespace: str, value: bool) -> None:
    """What `kubectl patch stack <name> --type=merge -p '{"spec":{"suspend":true}}'` does."""
    await kc.patch(resources.STACK, name, {"spec": {"suspend": value}}, namespace)


def _suspended(obj: objects.Object) -> bool:
    reconciling = e2e.condition(obj, "Reconciling")
    status = obj.get("status") or {}
    return (reconciling.get("status") == "False" and reconciling.get("reason") == "Suspended"
            and status.get("observedGeneration") == obj["metadata"]["generation"]
            and "currentUpdate" not in status)


async def _settle(op: operator.Operator, before: float) -> None:
    await waiting.settled(op.manager.registry, names.STACK_CONTROLLER, after=before)


async def test_suspend_lets_the_running_update_finish_and_resume_runs_one(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    tmp_path: Path,
) -> None:
    repo, release = f"suspend-{namespace}", tmp_path / "release"
    commit = git.create_repo(repo, {**e2e.program_files(marker="v1"), "__main__.py": SLOW_PROGRAM})
    await kc.create(e2e.git_stack("paused", namespace, git.http_url(repo), commit=commit,
                                  config={"release": str(release)}))
    running = await e2e.wait_for(kc, resources.STACK, "paused", namespace,
                                 lambda o: bool((o.get("status") or {}).get("currentUpdate")), interval=0.1)
    first = running["status"]["currentUpdate"]["name"]

    # Suspend while the Update runs: it was still running once the suspension was stored, and the status says that
    # no update follows it.
    await _suspend(kc, "paused", namespace, True)
    update = await kc.get_or_none(resources.UPDATE, first, namespace)
    assert update is None or not e2e.update_complete(update), "the Update finished before the Stack was suspended"
    in_flight = await e2e.wait_for(
        kc, resources.STACK, "paused", namespace,
        lambda o: e2e.condition(o, "Reconciling").get("message", "").endswith("no update starts after this one"),
        timeout=60, interval=0.1)
    assert e2e.condition(in_flight, "Reconciling")["status"] == "True"
    assert in_flight["status"]["currentUpdate"]["name"] == first

    # Let it finish: it is reported, and nothing starts after it.
    release.touch()
    stack = await e2e.wait_for(kc, resources.STACK, "paused", namespace, _suspended)
    last = e2e.last_update(stack)
    assert (last["name"], last["state"]) == (first, "succeeded")
    assert stack["status"]["outputs"]["marker"] == "v1"
    assert e2e.condition(stack, "Ready")["status"] == "True"  # the outcome of the Update that finished
    assert e2e.condition(stack, "Reconciling")["message"] == SUSPENDED_MESSAGE
    assert not e2e.condition(stack, "Stalled")
    events = await e2e.events_of(kc, "paused", namespace)
    assert [e["type"] for e in events if e["reason"] == "StackSuspended"] == ["Normal"]

    # While suspended, neither a spec change nor a sync request starts an Update; Ready keeps its value, and the
    # controller schedules no look of its own (not even the resync).
    before = waiting.reconciles(stack_operator.manager.registry, names.STACK_CONTROLLER)
    await kc.patch(resources.STACK, "paused", {"spec": {"config": {"greeting": "hello"},
                                                        "continueResyncOnCommitMatch": True,
                                                        "resyncFrequencySeconds": 60}}, namespace)
    await e2e.request_reconcile(kc, "paused", namespace, "while-suspended")
    stack = await e2e.wait_for(kc, resources.STACK, "paused", namespace, lambda o: _suspended(o) and (
        o["status"].get("observedReconcileRequest") == "while-suspended"))
    await _settle(stack_operator, before)
    assert [objects.name_of(u) for u in await e2e.updates_of(kc, "paused", namespace)] == [first]
    stack = await kc.get(resources.STACK, "paused", namespace)
    assert e2e.condition(stack, "Ready")["status"] == "True"
    assert e2e.condition(stack, "Reconciling")["reason"] == "Suspended"
    assert waiting.next_look(stack_operator.controllers.stacks.controller,
                             objects.ObjectKey(namespace, "paused")) is None
    assert sum(1 for e in await e2e.events_of(kc, "paused", namespace) if e["reason"] == "StackSuspended") == 1

    # Resume: one Update, with the spec changed meanwhile; then nothing more (the resync is a minute away).
    before = waiting.reconciles(stack_operator.manager.registry, names.STACK_CONTROLLER)
    await _suspend(kc, "paused", namespace, False)
    stack = await e2e.wait_for(kc, resources.STACK, "paused", namespace, e2e.is_ready)
    assert stack["status"]["outputs"]["greeting"] == "hello"
    assert e2e.last_update(stack)["reconcileRequest"] == "while-suspended"
    assert not e2e.condition(stack, "Reconciling")
    await _settle(stack_operator, before)
    updates = await e2e.updates_of(kc, "paused", namespace)
    assert len(updates) == 2, [u["spec"]["message"] for u in updates]
    assert updates[1]["spec"]["message"] == f"New stack generation: {stack['metadata']['generation']}"
    assert sum(1 for e in await e2e.events_of(kc, "paused", namespace) if e["reason"] == "StackResumed") == 1


async def test_deleting_a_suspended_stack_still_destroys(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    tmp_path: Path,
) -> None:
    repo = f"suspend-delete-{namespace}"
    commit = e2e.create_repo(git, repo)
    managed = tmp_path / "managed.txt"
    await kc.create(e2e.git_stack("doomed", namespace, git.http_url(repo), commit=commit, destroyOnFinalize=True,
                                  config={"path": str(managed), "content": "kept until destroyed"}))
    await e2e.wait_for(kc, resources.STACK, "doomed", namespace, e2e.is_ready)
    assert managed.read_text() == "kept until destroyed"
    await _suspend(kc, "doomed", namespace, True)
    await e2e.wait_for(kc, resources.STACK, "doomed", namespace, _suspended)

    deleted_at = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    await kc.delete(resources.STACK, "doomed", namespace)
    await e2e.wait_gone(kc, resources.STACK, "doomed", namespace)
    assert not managed.exists(), "the destroy did not run"
    destroys = [u for u in await e2e.updates_of(kc, "doomed", namespace) if u["spec"]["type"] == "destroy"]
    assert len(destroys) == 1
    assert e2e.timestamp(destroys[0]["metadata"]["creationTimestamp"]) >= deleted_at - datetime.timedelta(seconds=1)
