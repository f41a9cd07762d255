"""Stacks on a git source, end to end: a pinned commit becomes Ready (and, with `continueResyncOnCommitMatch`,
runs again once the resync frequency has elapsed); a branch is polled, and a commit pushed to it is deployed
without anyone touching the Stack. Real API server, real git server, real Pulumi CLI, the operator in-process.

The operator runs with `--min-resync-frequency` lowered from the Go operator's 60s, and both Stacks ask for less
than it: the resync and the poll come at the operator's floor, so the test waits seconds, not minutes, and still
shows the floor at work (the resync's message names the floor, not the Stack's frequency)."""

from __future__ import annotations

import datetime

import pytest
import stack_e2e as e2e

from pko.kube import client as kclient
from pko.kube import objects, resources
from pko.testing import gitserver, operator

MIN_RESYNC = 8  # seconds: the operator's floor; each Stack asks for 1s


@pytest.fixture
def min_resync_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Operators started after this run as `pko operator --min-resync-frequency 8s`."""
    e2e.with_settings(monkeypatch, min_resync=float(MIN_RESYNC))


@pytest.fixture
def polling_operator(min_resync_floor: None, stack_operator: operator.Operator) -> operator.Operator:
    """The suite's operator on the test's namespace, started after (so with) the lowered floor."""
    return stack_operator


async def test_commit_and_branch_stacks_follow_their_source(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, polling_operator: operator.Operator,
) -> None:
    pinned_repo, branch_repo = f"pinned-{namespace}", f"branch-{namespace}"
    pinned_commit = e2e.create_repo(git, pinned_repo, marker="pinned")
    first = e2e.create_repo(git, branch_repo, marker="v1")
    # Both Stacks run at the same time: their waits (resync, branch poll) overlap.
    await kc.create(e2e.git_stack("pinned", namespace, git.http_url(pinned_repo), commit=pinned_commit,
                                  continueResyncOnCommitMatch=True, resyncFrequencySeconds=1))  # below the floor
    await kc.create(e2e.git_stack("tracker", namespace, git.http_url(branch_repo), branch="main",
                                  resyncFrequencySeconds=1))  # below the floor: polled every MIN_RESYNC seconds

    tracker = await e2e.wait_for(kc, resources.STACK, "tracker", namespace, e2e.is_ready)
    last = e2e.last_update(tracker)
    assert last["state"] == "succeeded"
    assert last["lastAttemptedCommit"] == last["lastSuccessfulCommit"] == first
    assert tracker["status"]["outputs"]["marker"] == "v1"
    ws = await kc.get(resources.WORKSPACE, "tracker", namespace)
    assert ws["spec"]["git"] == {"url": git.http_url(branch_repo), "ref": first}

    # A new commit on the branch: nobody touches the Stack; the poll finds and deploys it.
    second = git.commit(branch_repo, {"marker.txt": "v2"}, message="v2")

    pinned = await e2e.wait_for(kc, resources.STACK, "pinned", namespace, e2e.is_ready)
    pinned_last = e2e.last_update(pinned)
    assert pinned_last["lastSuccessfulCommit"] == pinned_commit
    assert pinned["status"]["outputs"]["marker"] == "pinned"
    assert e2e.condition(pinned, "Ready")["reason"] == "ProcessingCompleted"
    assert "currentUpdate" not in pinned["status"]

    tracker = await e2e.wait_for(
        kc, resources.STACK, "tracker", namespace,
        lambda o: e2e.last_update(o).get("lastSuccessfulCommit") == second and e2e.is_ready(o), timeout=300)
    assert tracker["status"]["outputs"]["marker"] == "v2"
    assert e2e.last_update(tracker)["lastAttemptedCommit"] == second
    assert e2e.last_update(tracker)["name"] != last["name"]
    tracker_updates = await e2e.updates_of(kc, "tracker", namespace)
    assert [u["spec"]["message"] for u in tracker_updates] == [
        "Initial stack update", f'New commit detected: "{second}"']
    ws = await kc.get(resources.WORKSPACE, "tracker", namespace)
    assert ws["spec"]["git"]["ref"] == second

    # The pinned Stack resyncs on its own once the floor has passed since its last run, on the same commit.
    pinned = await e2e.wait_for(kc, resources.STACK, "pinned", namespace,
                                lambda o: e2e.last_update(o).get("name") != pinned_last["name"] and e2e.is_ready(o),
                                timeout=300)
    assert e2e.last_update(pinned)["lastSuccessfulCommit"] == pinned_commit
    assert e2e.timestamp(e2e.last_update(pinned)["lastResyncTime"]) > e2e.timestamp(pinned_last["lastResyncTime"])
    pinned_updates = await e2e.updates_of(kc, "pinned", namespace)
    messages = [u["spec"]["message"] for u in pinned_updates]
    assert messages[0] == "Initial stack update"
    assert set(messages[1:]) == {f"Resync time elapsed: {MIN_RESYNC}s"}, messages
    # The resync right after the run we read (with a floor of seconds, that run may itself have been a resync).
    resync = pinned_updates[[objects.name_of(u) for u in pinned_updates].index(pinned_last["name"]) + 1]
    assert e2e.timestamp(resync["metadata"]["creationTimestamp"]) >= (
        e2e.timestamp(pinned_last["lastResyncTime"]) + datetime.timedelta(seconds=MIN_RESYNC - 1)), \
        "the resync waited for the operator's floor, not the Stack's 1s"
    # The branch Stack, without continueResyncOnCommitMatch, did not resync on an unchanged commit.
    assert len(await e2e.updates_of(kc, "tracker", namespace)) == 2
