"""Drift detection (pko's `spec.driftDetection`), end to end with the real CLI: files managed by a dynamic provider
whose `read` sees the disk are changed and deleted behind Pulumi's back.

- Report only: the scheduled `preview --refresh` finds the drift and says so (`Drifted=True` listing the URNs and
  the kind of change, `status.drift`, a `DriftDetected` event, `pulumi_stack_drifted` 1 and the duration
  histogram) while nothing is applied: the files stay as they were left, `lastUpdate` and `Ready` are untouched,
  only the latest check's Update is kept, a check never overlaps an update, and a suspended Stack checks nothing.
- `remediate: true`: drift found starts one update with refresh, which puts the files back (`Drifted=False/
  Remediated`), and the next check finds no drift.
- Bad input: a schedule the API server cannot express as wrong (a reversed cron range) is a precise
  `Drifted=Unknown/InvalidSchedule` condition and event while updates go on; one it can is refused at once. A
  Stack without `driftDetection` gets none of it.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
import stack_e2e as e2e

from pko.api import names
from pko.kube import client as kclient
from pko.kube import errors, objects, resources
from pko.testing import gitserver, operator, programs, waiting

# Two files, alpha and beta, managed through a dynamic provider that can refresh (programs.FILES_MAIN).
FILES = {"Pulumi.yaml": "name: drift-e2e\nruntime: python\n", "__main__.py": programs.FILES_MAIN}


def _urn(stack: str, name: str) -> str:
    return f"urn:pulumi:{stack}::drift-e2e::pulumi-python:dynamic:Resource::{name}"


def _drifted(obj: objects.Object) -> dict[str, Any]:
    return e2e.condition(obj, "Drifted")


def _drift(obj: objects.Object) -> dict[str, Any]:
    return dict((obj.get("status") or {}).get("drift") or {})


def _checked_after(name: str | None) -> Any:
    """A Stack whose last check is a newer one than `name`, and none running."""
    def test(obj: objects.Object) -> bool:
        last = _drift(obj).get("lastCheck") or {}
        return bool(last) and last.get("name") != name and not _drift(obj).get("currentCheck")
    return test


async def _stack(kc: kclient.Client, git: gitserver.GitServer, name: str, namespace: str, root: Path,
                 **spec: Any) -> None:
    repo = f"{name}-{namespace}"
    commit = git.create_repo(repo, FILES)
    root.mkdir()
    await kc.create(e2e.git_stack(name, namespace, git.http_url(repo), commit=commit, config={"dir": str(root)},
                                  **spec))


async def _check_updates(kc: kclient.Client, name: str, namespace: str) -> list[objects.Object]:
    return [u for u in await e2e.updates_of(kc, name, namespace)
            if (u["metadata"].get("labels") or {}).get("pulumi.com/drift-check") == "true"]


async def test_drift_is_reported_and_nothing_is_applied(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    tmp_path: Path,
) -> None:
    root = tmp_path / "files"
    # The shortest interval the API takes, so the two checks this test waits for come as soon as they may.
    await _stack(kc, git, "watched", namespace, root, driftDetection={"interval": "10s", "jitter": "2s"})
    # A check and an update never hold the stack at once, whatever the controller does in between.
    overlaps: list[dict[str, Any]] = []

    def record(obj: objects.Object) -> None:
        status = obj.get("status") or {}
        if status.get("currentUpdate") and _drift(obj).get("currentCheck"):
            overlaps.append(status)

    ready = await e2e.wait_for(kc, resources.STACK, "watched", namespace, e2e.is_ready, seen=record)
    up = e2e.last_update(ready)
    assert (root / "alpha.txt").read_text() == "alpha as declared"

    # The first check, one interval (and this Stack's share of the jitter) after the update: no drift.
    clean = await e2e.wait_for(kc, resources.STACK, "watched", namespace,
                               lambda o: _drifted(o).get("status") == "False", seen=record, timeout=120)
    assert _drifted(clean)["reason"] == "NoDrift"
    assert _drifted(clean)["message"] == "the last drift check found no drift"
    first = _drift(clean)["lastCheck"]
    assert first["result"] == "succeeded"
    assert e2e.timestamp(first["startTime"]) >= e2e.timestamp(up["lastResyncTime"]) + datetime.timedelta(
        seconds=10)
    assert "resources" not in _drift(clean)
    # The check's Update (on a slow machine the next check may already have replaced it: every one is alike).
    checks = await _check_updates(kc, "watched", namespace)
    assert checks
    for check in checks:
        assert (check["spec"]["type"], check["spec"]["refresh"], check["spec"]["message"]) == (
            "preview", True, "Drift check")
        if check["metadata"]["name"] == first["name"]:
            assert check["status"]["drift"] == {"resources": [], "changes": {}}
    assert e2e.last_update(clean) == up
    assert e2e.condition(clean, "Ready")["status"] == "True"

    # Behind Pulumi's back: alpha is edited, beta deleted. The next check lists both, and applies nothing.
    (root / "alpha.txt").write_text("alpha edited by hand")
    (root / "beta.txt").unlink()
    drifted = await e2e.wait_for(kc, resources.STACK, "watched", namespace,
                                 lambda o: _drifted(o).get("status") == "True", seen=record, timeout=120)
    alpha, beta = _urn("watched", "alpha"), _urn("watched", "beta")
    assert _drifted(drifted)["reason"] == "DriftDetected"
    assert _drifted(drifted)["message"] == f"2 resource(s) drifted: {alpha} (update), {beta} (create)"
    assert _drift(drifted)["resources"] == [{"urn": alpha, "op": "update"}, {"urn": beta, "op": "create"}]
    assert _drift(drifted)["changes"] == {"create": 1, "update": 1}
    assert (root / "alpha.txt").read_text() == "alpha edited by hand"
    assert not (root / "beta.txt").exists()
    assert e2e.last_update(drifted) == up, "a drift check must not touch lastUpdate"
    assert e2e.condition(drifted, "Ready")["status"] == "True"
    assert not e2e.condition(drifted, "Reconciling")
    assert not e2e.condition(drifted, "Stalled")
    events = await e2e.events_of(kc, "watched", namespace)
    assert [(e["type"], e["message"]) for e in events if e["reason"] == "DriftDetected"] == [
        ("Warning", _drifted(drifted)["message"])]
    assert [e["type"] for e in events if e["reason"] == "NoDriftDetected"] == ["Normal"]

    # Only the latest check's Update is kept (the first one went when the next started); the only other Update is
    # the one up.
    updates = await e2e.updates_of(kc, "watched", namespace)
    assert [u["metadata"]["name"] for u in updates if u["spec"]["type"] != "preview"] == [up["name"]]
    assert await kc.get_or_none(resources.UPDATE, first["name"], namespace) is None
    assert 1 <= len(await _check_updates(kc, "watched", namespace)) <= 2  # 2: while the next replaces it

    # The metrics: drifted, and every check timed. They follow the Stack's watch events, which can reach the
    # operator's informer after this test read the status: waited for.
    drifted_series = ("pulumi_stack_drifted", (("name", "watched"), ("namespace", namespace)))
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    async def counted() -> bool:
        found.clear()
        found.update(await e2e.scrape(stack_operator, "pulumi_stack_drift"))
        return found.get(drifted_series) == 1

    await waiting.eventually(counted, "pulumi_stack_drifted of the drifted Stack to be 1", timeout=30, interval=0.2)
    assert found[drifted_series] == 1
    assert found[("pulumi_stack_drift_check_duration_seconds_count", (("result", "succeeded"),))] >= 1

    # Suspended: no check starts (the one in flight, if any, finishes).
    await kc.patch(resources.STACK, "watched", {"spec": {"suspend": True}}, namespace)
    suspended = await e2e.wait_for(
        kc, resources.STACK, "watched", namespace,
        lambda o: e2e.condition(o, "Reconciling").get("reason") == "Suspended" and not _drift(o).get("currentCheck"),
        seen=record)
    last_check = _drift(suspended)["lastCheck"]["name"]
    # The look the controller scheduled for the next check before the suspension still comes (within an interval
    # and its jitter); once it has come and gone, nothing is scheduled, so no check can start by itself.
    await e2e.quiet(stack_operator.manager.registry, names.STACK_CONTROLLER,
                    stack_operator.controllers.stacks.controller, objects.ObjectKey(namespace, "watched"))
    still = await kc.get(resources.STACK, "watched", namespace)
    assert _drift(still)["lastCheck"]["name"] == last_check
    assert not _drift(still).get("currentCheck")
    assert not overlaps, overlaps


async def test_remediate_puts_the_stack_back_with_one_refreshing_update(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    tmp_path: Path,
) -> None:
    root = tmp_path / "files"
    await _stack(kc, git, "healed", namespace, root, driftDetection={"interval": "10s", "remediate": True})
    ready = await e2e.wait_for(kc, resources.STACK, "healed", namespace, e2e.is_ready)
    up = e2e.last_update(ready)
    (root / "alpha.txt").write_text("alpha edited by hand")

    # Record the moment the remediation is reported (the next check may follow it within seconds).
    remediated: list[objects.Object] = []

    def record(obj: objects.Object) -> None:
        if _drifted(obj).get("reason") == "Remediated" and not remediated:
            remediated.append(obj)

    await e2e.wait_for(kc, resources.STACK, "healed", namespace, lambda o: bool(remediated), seen=record,
                       timeout=120, interval=0.2)
    healed = remediated[0]
    assert (root / "alpha.txt").read_text() == "alpha as declared"
    last = e2e.last_update(healed)
    assert last["name"] != up["name"]
    assert (last["state"], last["type"]) == ("succeeded", "up")
    assert e2e.is_ready(healed)
    assert _drifted(healed)["status"] == "False"
    assert _drifted(healed)["message"] == (
        f"update {last['name']} refreshed and applied the program; the next drift check confirms")
    assert _drift(healed)["remediation"] == last["name"]
    remediation = await kc.get(resources.UPDATE, last["name"], namespace)
    assert remediation["spec"]["refresh"] is True
    assert remediation["spec"]["message"] == "Drift detected: 1 resource(s) drifted; remediating"
    events = await e2e.events_of(kc, "healed", namespace)
    assert [e["message"] for e in events if e["reason"] == "DriftDetected"] == [
        f"1 resource(s) drifted: {_urn('healed', 'alpha')} (update)"]
    assert "Drift detected: 1 resource(s) drifted; remediating" in [
        e["message"] for e in events if e["reason"] == "StackUpdateDetected"]

    # The next check confirms; no further update ran.
    confirmed = await e2e.wait_for(kc, resources.STACK, "healed", namespace,
                                   lambda o: _drifted(o).get("reason") == "NoDrift", timeout=120)
    assert e2e.last_update(confirmed)["name"] == last["name"]
    ups = [u for u in await e2e.updates_of(kc, "healed", namespace) if u["spec"]["type"] == "up"]
    assert [u["metadata"]["name"] for u in ups] == [up["name"], last["name"]]


async def test_bad_schedules_are_refused_or_reported_and_plain_stacks_are_untouched(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    tmp_path: Path,
) -> None:
    # What the schema can tell is refused by the API server with its own message.
    with pytest.raises(errors.ApiError) as refused:
        await kc.create(e2e.git_stack("both", namespace, git.http_url("none"), commit="0" * 40,
                                      driftDetection={"interval": "1h", "cron": "0 * * * *"}))
    assert refused.value.code == 422
    assert "spec.driftDetection: Invalid value: \"object\": set exactly one of interval or cron" in str(
        refused.value.message)

    # A reversed range passes the schema; the Stack still updates, and says why it never checks.
    await _stack(kc, git, "backwards", namespace, tmp_path / "backwards",
                 driftDetection={"cron": "0 0 20-10 * *"})
    await _stack(kc, git, "plain", namespace, tmp_path / "plain")
    message = ("spec.driftDetection.cron: '0 0 20-10 * *': the day-of-month range 20-10 runs backwards; write it as "
               "two ranges: 20-31,1-10")
    stack = await e2e.wait_for(kc, resources.STACK, "backwards", namespace,
                               lambda o: e2e.is_ready(o) and bool(_drifted(o)))
    assert (_drifted(stack)["status"], _drifted(stack)["reason"], _drifted(stack)["message"]) == (
        "Unknown", "InvalidSchedule", message)
    events = await e2e.events_of(kc, "backwards", namespace)
    assert [(e["type"], e["message"]) for e in events if e["reason"] == "DriftScheduleInvalid"] == [
        ("Warning", message)]
    assert not await _check_updates(kc, "backwards", namespace)

    # Fixed, the condition goes (no check has run yet).
    await kc.patch(resources.STACK, "backwards", {"spec": {"driftDetection": {"cron": "@yearly"}}}, namespace)
    fixed = await e2e.wait_for(kc, resources.STACK, "backwards", namespace, e2e.is_ready)
    assert not _drifted(fixed)

    # A Stack written for the Go operator: no Drifted condition, no status.drift, no drift-check Update, no series.
    plain = await e2e.wait_for(kc, resources.STACK, "plain", namespace, e2e.is_ready)
    assert not _drifted(plain)
    assert "drift" not in plain["status"]
    assert not await _check_updates(kc, "plain", namespace)
    assert [u["spec"]["type"] for u in await e2e.updates_of(kc, "plain", namespace)] == ["up"]
    found = await e2e.scrape(stack_operator, "pulumi_stack_drift")
    assert ("pulumi_stack_drifted", (("name", "plain"), ("namespace", namespace))) not in found
    assert found[("pulumi_stack_drifted", (("name", "backwards"), ("namespace", namespace)))] == 0
