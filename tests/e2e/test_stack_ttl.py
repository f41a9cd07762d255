"""Stacks with a time to live (pko's `spec.ttl`), end to end: a Stack past its TTL is destroyed — whatever
`destroyOnFinalize` says — and only then deleted, its real resource gone and its stack empty in the backend; a
Stack deleted by hand before its TTL keeps the meaning `destroyOnFinalize` gives; a suspended Stack does not expire
until it is resumed; a destroy that fails, or that leaves resources in the stack (`ResourcesRemain`), keeps the
Stack with its finalizer, a clear status and events, and is retried with backoff until it succeeds."""

from __future__ import annotations

import asyncio
import datetime
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import stack_e2e as e2e

from pko.api import names
from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import gitserver, operator

FILE_URN = "urn:pulumi:{stack}::stack-e2e::pulumi-python:dynamic:Resource::file"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _resource_count(pulumi_env: dict[str, str], cwd: Path, stack: str) -> int:
    """The stack's resource count as the backend has it: its own state (`pulumi stack export`), never a listing of
    the backend, which races with the other Stack's retried destroys writing theirs (a file seen, then renamed
    away)."""
    exported = subprocess.run(["pulumi", "stack", "export", "--stack", f"organization/stack-e2e/{stack}"],
                              env=pulumi_env, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert exported.returncode == 0, exported.stderr
    return len(json.loads(exported.stdout)["deployment"].get("resources") or [])


async def _suspend(kc: kclient.Client, name: str, namespace: str, value: bool) -> None:
    await kc.patch(resources.STACK, name, {"spec": {"suspend": value}}, namespace)


async def test_a_stack_past_its_ttl_is_destroyed_then_deleted(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    tmp_path: Path, pulumi_env: dict[str, str],
) -> None:
    repo = f"ttl-{namespace}"
    commit = e2e.create_repo(git, repo)
    url = git.http_url(repo)
    files = {name: tmp_path / f"{name}.txt" for name in ("review", "early", "held")}

    def stack(name: str, ttl: str) -> dict[str, Any]:
        return e2e.git_stack(name, namespace, url, commit=commit, ttl=ttl,
                             config={"path": str(files[name]), "content": name})

    # review: 30s and no destroyOnFinalize; early: deleted by hand long before its TTL; held: suspended when its
    # TTL passes. Each starts with an hour and gets its short TTL once it is Ready (the TTL counts from creation, and
    # a changed TTL moves the deadline), so a slow first update never races the TTL.
    for name in files:
        await kc.create(stack(name, "1h"))
    review = await e2e.wait_for(kc, resources.STACK, "review", namespace, e2e.is_ready)
    created = e2e.timestamp(review["metadata"]["creationTimestamp"])
    assert files["review"].read_text() == "review"
    await kc.patch(resources.STACK, "review", {"spec": {"ttl": "30s"}}, namespace)
    held = await e2e.wait_for(kc, resources.STACK, "held", namespace, e2e.is_ready)
    await _suspend(kc, "held", namespace, True)
    await kc.patch(resources.STACK, "held", {"spec": {"ttl": "20s"}}, namespace)
    await e2e.wait_for(kc, resources.STACK, "early", namespace, e2e.is_ready)
    await kc.delete(resources.STACK, "early", namespace)
    await e2e.wait_gone(kc, resources.STACK, "early", namespace, timeout=60)
    assert files["early"].read_text() == "early", "a Stack deleted before its TTL was destroyed"
    assert [u["spec"]["type"] for u in await e2e.updates_of(kc, "early", namespace)] == ["up"]

    # The TTL passes: the Stack is marked, deleted, destroyed, and goes.
    await e2e.wait_gone(kc, resources.STACK, "review", namespace, timeout=120)
    assert _now() >= created + datetime.timedelta(seconds=30), "the Stack went before its TTL had passed"
    assert not files["review"].exists(), "the Stack went, its resource stayed"
    assert _resource_count(pulumi_env, tmp_path, "review") == 0
    updates = await e2e.updates_of(kc, "review", namespace)
    types = [u["spec"]["type"] for u in updates]  # the ttl patch is a new generation: it may run an up first
    assert types[-1] == "destroy"
    assert set(types[:-1]) == {"up"}
    destroy = updates[-1]
    assert destroy["metadata"]["annotations"][names.ANNOTATION_EXPECT_EMPTY] == "true"
    assert e2e.condition(destroy, "Failed")["status"] == "False"
    assert e2e.timestamp(destroy["metadata"]["creationTimestamp"]) >= created + datetime.timedelta(seconds=29)
    expired = [e for e in await e2e.events_of(kc, "review", namespace) if e["reason"] == "StackExpired"]
    assert len(expired) == 1
    assert expired[0]["type"] == "Normal"
    assert expired[0]["message"].startswith("the Stack's ttl (30s) passed at ")

    # held's TTL passed while it was suspended: it is still there, untouched.
    held_expiry = e2e.timestamp(held["metadata"]["creationTimestamp"]) + datetime.timedelta(seconds=21)
    await asyncio.sleep(max(0.0, (held_expiry - _now()).total_seconds()))  # a TTL is a time: wait for it, no longer
    held = await kc.get(resources.STACK, "held", namespace)
    assert not held["metadata"].get("deletionTimestamp")
    assert names.ANNOTATION_EXPIRED not in (held["metadata"].get("annotations") or {})
    assert files["held"].read_text() == "held"
    # Resumed, it expires at once.
    await _suspend(kc, "held", namespace, False)
    await e2e.wait_gone(kc, resources.STACK, "held", namespace, timeout=120)
    assert not files["held"].exists()
    assert _resource_count(pulumi_env, tmp_path, "held") == 0


def _destroy_failed(times: int) -> Callable[[dict[str, Any]], bool]:
    def test(obj: dict[str, Any]) -> bool:
        last = e2e.last_update(obj)
        return last.get("type") == "destroy" and last.get("state") == "failed" and last.get("failures", 0) >= times
    return test


async def test_a_failing_ttl_destroy_keeps_the_stack_and_retries(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    tmp_path: Path, pulumi_env: dict[str, str],
) -> None:
    repo = f"ttl-fail-{namespace}"
    commit = e2e.create_repo(git, repo)
    url = git.http_url(repo)
    guarded, guard, targeted = tmp_path / "guarded.txt", tmp_path / "guard", tmp_path / "targeted.txt"
    guard.write_text("keep")
    # guarded: its resource refuses to be deleted while the guard file exists; one failure would stall an update
    # (maxFailures 1), never the TTL's destroy. targeted: once deployed, an updateTemplate makes every operation
    # target the file only, so its destroy succeeds and leaves the stack's other resources (its root and the
    # dynamic provider). Both expire once Ready.
    await kc.create(e2e.git_stack("guarded", namespace, url, commit=commit, ttl="1h",
                                  retryMaxBackoffDurationSeconds=3, retryPolicy={"maxFailures": 1},
                                  config={"path": str(guarded), "content": "guarded", "guard": str(guard)}))
    await kc.create(e2e.git_stack("targeted", namespace, url, commit=commit, ttl="1h",
                                  retryMaxBackoffDurationSeconds=3,
                                  config={"path": str(targeted), "content": "targeted"}))
    await e2e.wait_for(kc, resources.STACK, "guarded", namespace, e2e.is_ready)
    await kc.patch(resources.STACK, "guarded", {"spec": {"ttl": "1s"}}, namespace)
    await e2e.wait_for(kc, resources.STACK, "targeted", namespace, e2e.is_ready)
    await kc.patch(resources.STACK, "targeted", {"spec": {
        "ttl": "1s", "updateTemplate": {"spec": {"target": [FILE_URN.format(stack="targeted")]}}}}, namespace)

    failing = await e2e.wait_for(kc, resources.STACK, "guarded", namespace, _destroy_failed(2), timeout=180)
    assert failing["metadata"]["deletionTimestamp"]
    assert failing["metadata"]["finalizers"] == [names.FINALIZER]
    assert failing["metadata"]["annotations"][names.ANNOTATION_EXPIRED]
    assert "guard file" in e2e.last_update(failing)["message"]
    assert e2e.condition(failing, "Ready")["status"] == "False"
    assert e2e.condition(failing, "Reconciling")["reason"] == "RetryingAfterFailure"
    assert not e2e.reason(failing, "Stalled"), "the TTL's destroy stalled"
    assert guarded.read_text() == "guarded", "a failed destroy left the resource alone"
    failures = await e2e.events_with(kc, "guarded", namespace, "StackUpdateFailure")
    assert all(e["type"] == "Warning" for e in failures)

    left = await e2e.wait_for(kc, resources.STACK, "targeted", namespace, _destroy_failed(0), timeout=180)
    assert left["metadata"]["finalizers"] == [names.FINALIZER]
    destroys = [u for u in await e2e.updates_of(kc, "targeted", namespace) if u["spec"]["type"] == "destroy"]
    # the first destroy deleted the file and left the rest: ResourcesRemain (a retry of the same targeted destroy
    # then fails in the CLI, the file being gone)
    assert e2e.condition(destroys[0], "Failed")["reason"] == "ResourcesRemain"
    assert "resources remain in the stack" in destroys[0]["status"]["message"]
    assert not targeted.exists(), "the targeted destroy did not run"
    assert _resource_count(pulumi_env, tmp_path, "targeted") > 0

    # The causes go: the next retries destroy everything, and only then do the Stacks go.
    guard.unlink()
    await kc.patch(resources.STACK, "targeted", {"spec": {"updateTemplate": None}}, namespace)
    await e2e.wait_gone(kc, resources.STACK, "guarded", namespace, timeout=120)
    await e2e.wait_gone(kc, resources.STACK, "targeted", namespace, timeout=120)
    assert not guarded.exists()
    assert _resource_count(pulumi_env, tmp_path, "guarded") == 0
    assert _resource_count(pulumi_env, tmp_path, "targeted") == 0
    destroys = [u for u in await e2e.updates_of(kc, "guarded", namespace) if u["spec"]["type"] == "destroy"]
    assert len(destroys) >= 3
    assert [e2e.condition(u, "Failed")["status"] for u in destroys][-1] == "False"
