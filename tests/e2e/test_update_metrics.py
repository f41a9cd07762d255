"""pko's update metrics and change summary, end to end (docs/metrics.md): a Stack whose program manages a real
file (a dynamic provider) is created, updated, broken and fixed by the real Pulumi CLI through a local agent, and
after each update `/metrics` (fetched over HTTP), the Update's `status.resourceChanges`, the Stack's
`status.lastUpdate.resourceChanges` and the events show what the engine reported: the file created, then updated;
a failed replacement counted as a failure that moves no last-success time and stalls the Stack; the fix."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import stack_e2e as e2e

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import gitserver, operator

Samples = e2e.Samples


def _get(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


async def _eventually(op: operator.Operator, check: Any, timeout: float = 30) -> Samples:
    """The metrics once `check(samples)` holds (the Update controller records them as the Stack sees its Update
    complete: both race)."""
    deadline = time.monotonic() + timeout
    samples: Samples = {}
    while time.monotonic() < deadline:
        samples = await e2e.scrape(op, "pulumi_")
        if check(samples):
            return samples
        await asyncio.sleep(0.3)
    raise AssertionError(f"metrics never matched; last: {samples}")


def _messages(events: list[dict[str, Any]], reason: str) -> list[str]:
    ordered = sorted(events, key=lambda e: (e.get("lastTimestamp") or e.get("eventTime") or "", e["message"]))
    return [e["message"] for e in ordered if e["reason"] == reason]


async def test_update_metrics_and_change_summary_follow_real_updates(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    tmp_path: Path,
) -> None:
    repo = f"metered-{namespace}"
    commit = e2e.create_repo(git, repo)
    target = tmp_path / "managed.txt"
    ns, name = namespace, "metered"
    up = {"namespace": ns, "stack": name, "type": "up"}
    started = time.time()
    await kc.create(e2e.git_stack(name, ns, git.http_url(repo), commit=commit,
                                  config={"path": str(target), "content": "one"},
                                  retryPolicy={"maxFailures": 0}))

    # 1. The first up creates the file (and the stack resource).
    stack = await e2e.wait_for(kc, resources.STACK, name, ns, e2e.is_ready, timeout=300)
    assert target.read_text() == "one"
    first = e2e.last_update(stack)
    created = first["resourceChanges"]
    assert created.get("create", 0) >= 2, created  # the pulumi:pulumi:Stack and the file
    assert set(created) <= {"create", "same"}, created
    update = await kc.get(resources.UPDATE, first["name"], ns)
    assert update["status"]["resourceChanges"] == created
    summary = f"{created['create']} created, 0 updated, 0 deleted"
    assert _messages(await e2e.events_of(kc, name, ns), "StackCreated") == [
        f"Successfully updated stack: {summary}"]
    # The Update controller posts its event after the Update's status, which the Stack may absorb first: waited for.
    assert _messages(await e2e.events_with(kc, first["name"], ns, "UpdateSucceeded", kind="Update"),
                     "UpdateSucceeded") == [f"Successfully updated the stack: {summary}"]

    samples = await _eventually(stack_operator, lambda s: _get(
        s, "pulumi_update_duration_seconds_count", **up, result="succeeded") == 1)
    assert _get(samples, "pulumi_stack_resource_changes_total", **up, op="create") == created["create"]
    assert _get(samples, "pulumi_stack_resource_changes_total", **up, op="update") == 0
    assert _get(samples, "pulumi_stack_resource_changes_total", **up, op="delete") == 0
    for phase in ("fetch", "install", "operation"):
        assert _get(samples, "pulumi_update_phase_duration_seconds_count", namespace=ns, stack=name,
                    phase=phase) == 1, phase
    operation = _get(samples, "pulumi_update_phase_duration_seconds_sum", namespace=ns, stack=name,
                     phase="operation")
    total = _get(samples, "pulumi_update_duration_seconds_sum", **up, result="succeeded")
    assert operation is not None
    assert total is not None
    assert 0 < operation <= total + 1  # the Update's total holds its operation (creation time: whole seconds)
    first_success = _get(samples, "pulumi_stack_last_success_timestamp_seconds", **up)
    assert first_success is not None
    assert started - 1 <= first_success <= time.time()

    # 2. New content: the file is updated in place.
    await kc.patch(resources.STACK, name, {"spec": {"config": {"content": "two"}}}, ns)
    stack = await e2e.wait_for(kc, resources.STACK, name, ns, e2e.is_ready, timeout=300)
    assert target.read_text() == "two"
    second = e2e.last_update(stack)
    assert second["name"] != first["name"]
    assert second["resourceChanges"].get("update") == 1, second["resourceChanges"]
    assert second["resourceChanges"].get("create", 0) == 0, second["resourceChanges"]
    assert _messages(await e2e.events_of(kc, name, ns), "StackCreated")[-1] == (
        "Successfully updated stack: 0 created, 1 updated, 0 deleted")
    samples = await _eventually(stack_operator, lambda s: _get(
        s, "pulumi_update_duration_seconds_count", **up, result="succeeded") == 2)
    assert _get(samples, "pulumi_stack_resource_changes_total", **up, op="update") == 1
    assert _get(samples, "pulumi_stack_resource_changes_total", **up, op="create") == created["create"]
    second_success = _get(samples, "pulumi_stack_last_success_timestamp_seconds", **up)
    assert second_success is not None
    assert second_success > first_success
    assert not [k for k in samples if k[0] == "pulumi_stack_stalled"]

    # 3. A path in a missing directory: the replacement's create fails; the Stack stalls (maxFailures 0).
    await kc.patch(resources.STACK, name, {"spec": {"config": {"path": str(tmp_path / "missing" / "f.txt")}}}, ns)
    stack = await e2e.wait_for(kc, resources.STACK, name, ns,
                               lambda o: e2e.reason(o, "Stalled") == "UpdateFailed"
                               and e2e.last_update(o).get("generation") == o["metadata"]["generation"],
                               timeout=300)
    failed = e2e.last_update(stack)
    assert failed["state"] == "failed"
    changes = failed["resourceChanges"]  # what the engine did before the failure: nothing created or deleted
    assert changes.get("create", 0) == changes.get("delete", 0) == 0, changes
    failure_events = _messages(await e2e.events_of(kc, name, ns), "StackUpdateFailure")
    assert len(failure_events) == 1
    assert failure_events[0].startswith(f"Failed to update stack ({e2e_summary(changes)}): up failed")
    update = await kc.get(resources.UPDATE, failed["name"], ns)
    assert update["status"]["resourceChanges"] == changes
    assert [m.split(": ")[0] for m in _messages(
        await e2e.events_with(kc, failed["name"], ns, "UpdateFailed", kind="Update"), "UpdateFailed")] == [
        f"Failed to update the stack ({e2e_summary(changes)})"]
    samples = await _eventually(stack_operator, lambda s: _get(
        s, "pulumi_update_duration_seconds_count", **up, result="failed") == 1
        and _get(s, "pulumi_stack_stalled", namespace=ns, stack=name, reason="UpdateFailed") == 1)
    assert _get(samples, "pulumi_update_duration_seconds_count", **up, result="succeeded") == 2
    assert _get(samples, "pulumi_stack_last_success_timestamp_seconds", **up) == second_success
    assert target.read_text() == "two"  # nothing was deleted

    # 4. The fix: back to the old path, nothing to change; the stall is over.
    await kc.patch(resources.STACK, name, {"spec": {"config": {"path": str(target)}}}, ns)
    stack = await e2e.wait_for(kc, resources.STACK, name, ns, e2e.is_ready, timeout=300)
    assert e2e.last_update(stack)["resourceChanges"].get("same", 0) >= 2
    samples = await _eventually(stack_operator, lambda s: _get(
        s, "pulumi_update_duration_seconds_count", **up, result="succeeded") == 3
        and not [k for k in s if k[0] == "pulumi_stack_stalled"])
    third_success = _get(samples, "pulumi_stack_last_success_timestamp_seconds", **up)
    assert third_success is not None
    assert third_success > second_success


def e2e_summary(changes: dict[str, int]) -> str:
    """The one-line summary the events carry (pko.api.update.describe_changes, spelled out here)."""
    text = f"{changes.get('create', 0)} created, {changes.get('update', 0)} updated, {changes.get('delete', 0)} deleted"
    return text + (f", {changes['replace']} replaced" if changes.get("replace") else "")
