"""Approvals bound to a reviewed preview (pko's `spec.approval`), end to end on the real control plane with the real
Pulumi CLI: a gated Stack previews and saves its update plan, shows the digest and change summary, and applies
nothing until a StackApproval names it and that digest; then exactly that plan is applied (`up --plan`) and who
approved is recorded. Refused, each with its reason on the approval and a `StackApprovalRefused` event: an approval
of another plan (another Stack's, or an older preview's, made stale by a config change), and an expired one. The
API server refuses approvals without their required fields or changed after creation, and (with the chart's
ValidatingAdmissionPolicy) one whose `approvedBy` is not the requesting user. With the Go reference agent, which
cannot save plans, the Stack stalls with a clear condition and nothing is applied."""

from __future__ import annotations

import asyncio
import datetime
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import stack_e2e as e2e
import yaml

from pko.api import names
from pko.kube import client as kclient
from pko.kube import errors, objects, resources
from pko.testing import binaries, controlplane, gitserver, operator, waiting

ROOT = Path(__file__).resolve().parents[2]
APPROVAL = resources.STACK_APPROVAL
VAP = resources.register(resources.Kind("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy",
                                        "validatingadmissionpolicies", namespaced=False))
VAP_BINDING = resources.register(resources.Kind("admissionregistration.k8s.io/v1",
                                                "ValidatingAdmissionPolicyBinding",
                                                "validatingadmissionpolicybindings", namespaced=False))


def _review(obj: objects.Object) -> dict[str, Any]:
    return dict((obj.get("status") or {}).get("approval") or {})


def awaiting(other_than: str | None = None) -> Callable[[objects.Object], bool]:
    """The Stack awaits approval of a plan (another than `other_than`), for its current generation."""
    def test(obj: objects.Object) -> bool:
        review = _review(obj)
        return (review.get("state") == "AwaitingApproval" and bool(review.get("digest"))
                and review.get("digest") != other_than
                and review.get("generation") == obj["metadata"]["generation"]
                and e2e.condition(obj, "AwaitingApproval").get("status") == "True")
    return test


def approval(name: str, namespace: str, stack: str, digest: str, by: str = controlplane.ADMIN_USER
             ) -> dict[str, Any]:
    return APPROVAL.new(name, namespace, spec={"stackName": stack, "digest": digest, "approvedBy": by})


def decided(obj: objects.Object) -> bool:
    return bool(e2e.condition(obj, "Accepted"))


async def _gated(kc: kclient.Client, git: gitserver.GitServer, namespace: str, name: str, managed: Path,
                 **spec: Any) -> None:
    repo = f"{name}-{namespace}"
    commit = e2e.create_repo(git, repo)
    await kc.create(e2e.git_stack(name, namespace, git.http_url(repo), commit=commit,
                                  approval={"required": True, **spec},
                                  config={"path": str(managed), "content": "v1"}))


async def test_an_update_waits_for_an_approval_of_its_reviewed_plan(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    tmp_path: Path,
) -> None:
    managed, elsewhere = tmp_path / "gated.txt", tmp_path / "other.txt"
    await _gated(kc, git, namespace, "gated", managed)
    await _gated(kc, git, namespace, "other", elsewhere)
    stack = await e2e.wait_for(kc, resources.STACK, "gated", namespace, awaiting(), timeout=120)
    other = await e2e.wait_for(kc, resources.STACK, "other", namespace, awaiting(), timeout=120)

    # The preview saved a plan and nothing was applied: digest and change summary on the Stack, not Ready.
    review = _review(stack)
    digest = review["digest"]
    assert len(digest) == 64
    assert review["changes"] == {"create": 2}  # the stack and the managed file
    assert not managed.exists()
    assert "lastUpdate" not in stack["status"]
    assert e2e.condition(stack, "Ready")["status"] == "False"
    assert e2e.condition(stack, "Reconciling")["reason"] == "AwaitingApproval"
    assert digest in e2e.condition(stack, "AwaitingApproval")["message"]
    assert "create=2" in e2e.condition(stack, "AwaitingApproval")["message"]
    [preview] = await e2e.updates_of(kc, "gated", namespace)
    assert preview["spec"]["type"] == "preview"
    assert preview["metadata"]["annotations"][names.ANNOTATION_PLANNED_DIGEST] == digest
    assert [e["message"] for e in await e2e.events_of(kc, "gated", namespace)
            if e["reason"] == "StackAwaitingApproval"] == [e2e.condition(stack, "AwaitingApproval")["message"]]
    assert _review(other)["digest"] != digest

    # An approval naming another Stack (with this Stack's digest) and one of a plan never shown are refused.
    await kc.create(approval("wrong-stack", namespace, "other", digest))
    await kc.create(approval("wrong-digest", namespace, "gated", "0" * 64))
    for name, stack_name, shown in (("wrong-stack", "other", _review(other)["digest"]),
                                    ("wrong-digest", "gated", digest)):
        refused = await e2e.wait_for(kc, APPROVAL, name, namespace, decided)
        accepted = e2e.condition(refused, "Accepted")
        assert (accepted["status"], accepted["reason"]) == ("False", "DigestMismatch")
        assert shown in accepted["message"]

        async def refusal_event(name: str = name, stack_name: str = stack_name) -> bool:
            # the event is posted after the approval's status is written: wait for it, do not race it
            return any(e["reason"] == "StackApprovalRefused" and name in e["message"] and e["type"] == "Warning"
                       for e in await e2e.events_of(kc, stack_name, namespace))

        await waiting.eventually(refusal_event, f"a StackApprovalRefused event naming {name}", timeout=30,
                                 interval=0.5)
    assert not managed.exists()
    assert not elsewhere.exists()
    assert awaiting()(await kc.get(resources.STACK, "gated", namespace))

    # The approval of the shown plan: that plan is applied, and who approved is on the Stack and in an event.
    await kc.create(approval("ok", namespace, "gated", digest))
    stack = await e2e.wait_for(kc, resources.STACK, "gated", namespace, e2e.is_ready, timeout=120)
    assert managed.read_text() == "v1"
    review = _review(stack)
    assert (review["state"], review["digest"], review["approval"], review["approvedBy"]) == (
        "Approved", digest, "ok", controlplane.ADMIN_USER)
    assert not e2e.condition(stack, "AwaitingApproval")
    ok = await kc.get(APPROVAL, "ok", namespace)
    assert (e2e.condition(ok, "Accepted")["status"], e2e.condition(ok, "Accepted")["reason"]) == ("True", "Applied")
    applied = await kc.get(resources.UPDATE, ok["status"]["update"], namespace)
    assert applied["spec"]["type"] == "up"
    assert applied["metadata"]["annotations"][names.ANNOTATION_PLAN_DIGEST] == digest
    assert e2e.last_update(stack)["name"] == ok["status"]["update"]
    assert any(e["reason"] == "StackApproved" and f"approved by {controlplane.ADMIN_USER}" in e["message"]
               for e in await e2e.events_of(kc, "gated", namespace))
    assert not elsewhere.exists()

    # A config change needs a new approval; a second change makes that plan stale: a new preview, a new digest,
    # and the approval of the stale digest is refused.
    await kc.patch(resources.STACK, "gated", {"spec": {"config": {"content": "v2"}}}, namespace)
    second = _review(await e2e.wait_for(kc, resources.STACK, "gated", namespace, awaiting(digest), timeout=120))
    await kc.patch(resources.STACK, "gated", {"spec": {"config": {"content": "v3"}}}, namespace)
    third = _review(await e2e.wait_for(kc, resources.STACK, "gated", namespace, awaiting(second["digest"]),
                                       timeout=120))
    assert third["changes"] == {"same": 1, "update": 1}
    assert managed.read_text() == "v1"
    await kc.create(approval("stale", namespace, "gated", second["digest"]))
    stale = e2e.condition(await e2e.wait_for(kc, APPROVAL, "stale", namespace, decided), "Accepted")
    assert (stale["status"], stale["reason"]) == ("False", "DigestMismatch")
    await kc.create(approval("fresh", namespace, "gated", third["digest"]))
    await e2e.wait_for(kc, resources.STACK, "gated", namespace, e2e.is_ready, timeout=120)
    assert managed.read_text() == "v3"


async def test_an_expired_approval_is_refused(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, cluster: controlplane.ControlPlane,
    tmp_path: Path, pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    managed = tmp_path / "late.txt"
    async with operator.running(cluster.kubeconfig, tmp_path / "workspaces", namespace=namespace):
        await _gated(kc, git, namespace, "late", managed, ttlSeconds=1)
        digest = _review(await e2e.wait_for(kc, resources.STACK, "late", namespace, awaiting(), timeout=120))["digest"]
    # Approved while no operator runs; by the time one looks, the approval is older than the Stack's TTL.
    await kc.create(approval("slow", namespace, "late", digest))
    await asyncio.sleep(2.5)
    async with operator.running(cluster.kubeconfig, tmp_path / "workspaces", namespace=namespace):
        refused = await e2e.wait_for(kc, APPROVAL, "slow", namespace, decided, timeout=60)
    accepted = e2e.condition(refused, "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "Expired")
    assert "ttlSeconds" in accepted["message"]
    stack = await kc.get(resources.STACK, "late", namespace)
    assert _review(stack)["state"] == "AwaitingApproval"
    assert "lastUpdate" not in stack["status"]
    assert not managed.exists()


async def test_the_api_server_refuses_incomplete_or_changed_approvals(kc: kclient.Client, namespace: str) -> None:
    digest = "a" * 64
    bad = {
        "no-digest": {"stackName": "s", "approvedBy": "admin"},
        "short-digest": {"stackName": "s", "digest": "abc", "approvedBy": "admin"},
        "no-stack": {"digest": digest, "approvedBy": "admin"},
        "no-approver": {"stackName": "s", "digest": digest},
    }
    for name, spec in bad.items():
        with pytest.raises(errors.ApiError) as refused:
            await kc.create(APPROVAL.new(name, namespace, spec=spec))
        assert refused.value.code == 422, name
    with pytest.raises(errors.ApiError) as no_spec:
        await kc.create(APPROVAL.new("no-spec", namespace))
    assert "spec is required" in no_spec.value.message
    await kc.create(approval("kept", namespace, "s", digest))
    with pytest.raises(errors.ApiError) as changed:
        await kc.patch(APPROVAL, "kept", {"spec": {"digest": "b" * 64}}, namespace)
    assert "cannot be changed" in changed.value.message


def _chart_policy(namespace: str) -> list[dict[str, Any]]:
    """The chart's admission policy and binding, the binding limited to `namespace` (the control plane is shared)."""
    rendered = subprocess.run(
        [str(binaries.require("helm")), "template", "pko", str(ROOT / "deploy" / "helm" / "pko"),
         "--show-only", "templates/approvals.yaml", "--set", "approvals.approverRole=false",
         # what `helm install` learns from a 1.30+ API server's discovery
         "--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
         "--set", f"fullnameOverride=pko-{namespace}"],
        check=True, capture_output=True, text=True).stdout
    documents = [d for d in yaml.safe_load_all(rendered) if d]
    for document in documents:
        if document["kind"] == "ValidatingAdmissionPolicyBinding":
            document["spec"]["matchResources"] = {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
    return documents


async def test_the_chart_policy_records_the_requesting_user_as_approver(kc: kclient.Client, namespace: str) -> None:
    documents = _chart_policy(namespace)
    for document in documents:
        await kc.create(document)
    try:
        digest = "c" * 64
        message = ""
        for attempt in range(100):  # the API server loads a new policy within a few seconds
            try:
                await kc.create(approval(f"mallory-{attempt}", namespace, "s", digest, by="mallory"))
            except errors.ApiError as err:
                message = err.message
                break
            await asyncio.sleep(0.2)
        assert f"must be the name of the user creating the approval: {controlplane.ADMIN_USER}" in message
        created = await kc.create(approval("honest", namespace, "s", digest))
        assert created["spec"]["approvedBy"] == controlplane.ADMIN_USER
    finally:
        for document in documents:
            await kc.delete(resources.of(document), document["metadata"]["name"], missing_ok=True)


async def test_with_the_go_agent_a_gated_stack_stalls_and_applies_nothing(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, cluster: controlplane.ControlPlane,
    tmp_path: Path, pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    managed = tmp_path / "go.txt"
    agent = str(binaries.require("pko-go-agent"))
    async with operator.running(cluster.kubeconfig, tmp_path / "workspaces", namespace=namespace,
                                workspace_agent=agent):
        await _gated(kc, git, namespace, "goagent", managed)
        stack = await e2e.wait_for(kc, resources.STACK, "goagent", namespace,
                                   lambda o: e2e.reason(o, "Stalled") == "UpdatePlansUnsupported", timeout=120)
    assert "needs a workspace agent that saves update plans" in e2e.condition(stack, "Stalled")["message"]
    assert _review(stack)["state"] == "Unsupported"
    assert not managed.exists()
    updates = await e2e.updates_of(kc, "goagent", namespace)
    assert [u["spec"]["type"] for u in updates] == ["preview"]
    assert e2e.condition(updates[0], "Failed")["reason"] == "UpdatePlansUnsupported"


async def test_an_awaited_plan_keeps_an_idle_workspace_awake(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    tmp_path: Path,
) -> None:
    """With scale to zero, a workspace does not fall asleep while its plan awaits approval (the plan lives in the
    workspace): approved long after the idle timeout, the plan is still there and applied; then the workspace
    sleeps."""
    managed = tmp_path / "awake.txt"
    await _gated(kc, git, namespace, "awake", managed)
    await kc.patch(resources.STACK, "awake", {"spec": {"workspaceIdleTimeout": "1s"}}, namespace)
    stack = await e2e.wait_for(kc, resources.STACK, "awake", namespace, awaiting(), timeout=120)
    # A workspace with nothing to keep would fall asleep 1s after the preview completed (timestamps are whole
    # seconds: 2s) on a timer its controller set; once that moment is past and every look the controller scheduled
    # has come and gone, it would be asleep, and no look is due again.
    previews = [u for u in await e2e.updates_of(kc, "awake", namespace) if e2e.update_complete(u)]
    done = e2e.timestamp(e2e.condition(previews[-1], "Complete")["lastTransitionTime"])
    await waiting.eventually(lambda: datetime.datetime.now(datetime.UTC) >= done + datetime.timedelta(seconds=2),
                             "the idle timeout to pass", timeout=30)
    await e2e.quiet(stack_operator.manager.registry, names.WORKSPACE_CONTROLLER,
                    stack_operator.controllers.workspaces.controller, objects.ObjectKey(namespace, "awake"))
    workspace = await kc.get(resources.WORKSPACE, "awake", namespace)
    assert e2e.condition(workspace, "Ready").get("reason") != "Sleeping", workspace.get("status")

    await kc.create(approval("ok", namespace, "awake", _review(stack)["digest"]))
    await e2e.wait_for(kc, resources.STACK, "awake", namespace, e2e.is_ready, timeout=120)
    assert managed.read_text() == "v1"
    await e2e.wait_for(kc, resources.WORKSPACE, "awake", namespace,
                       lambda o: e2e.condition(o, "Ready").get("reason") == "Sleeping", timeout=60)


async def test_an_approved_plan_that_the_program_no_longer_matches_is_refused_and_nothing_applied(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    tmp_path: Path,
) -> None:
    """The approved `up` applies exactly the reviewed plan (`up --plan`): when the program would now do something
    else (here, write other content than the preview showed), Pulumi's plan check refuses the update, the Stack
    says so in its last update, and nothing outside the review is applied."""
    managed, source = tmp_path / "managed.txt", tmp_path / "source.txt"
    source.write_text("reviewed")
    repo = f"drifting-{namespace}"
    commit = e2e.create_repo(git, repo)
    await kc.create(e2e.git_stack("drifting", namespace, git.http_url(repo), commit=commit,
                                  approval={"required": True},
                                  config={"path": str(managed), "contentFile": str(source)}))
    digest = _review(await e2e.wait_for(kc, resources.STACK, "drifting", namespace, awaiting(), timeout=120))["digest"]
    source.write_text("changed after the review")

    await kc.create(approval("ok", namespace, "drifting", digest))
    failed = await e2e.wait_for(kc, resources.STACK, "drifting", namespace,
                                lambda o: e2e.last_update(o).get("state") == "failed", timeout=120)
    assert "plan" in e2e.last_update(failed).get("message", "").lower(), failed["status"]
    assert not managed.exists(), "an update outside the reviewed plan was applied"
    [up] = [u for u in await e2e.updates_of(kc, "drifting", namespace) if u["spec"]["type"] == "up"]
    assert up["metadata"]["annotations"][names.ANNOTATION_PLAN_DIGEST] == digest
    assert e2e.condition(up, "Failed")["status"] == "True"


async def test_a_plan_the_workspace_lost_applies_nothing_and_is_previewed_anew(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    tmp_path: Path,
) -> None:
    """The plan lives in the workspace. When the approved `up` finds it gone (the workspace was recreated since the
    preview: a replaced pod, a restarted operator on the local runtime; here its file is removed), nothing runs: the
    approval is marked `PlanNotFound`, no failed update is recorded (no backoff), a `StackPlanLost` warning says
    why, and a new preview asks for a new approval, which applies."""
    managed = tmp_path / "lost.txt"
    await _gated(kc, git, namespace, "lost", managed)
    stack = await e2e.wait_for(kc, resources.STACK, "lost", namespace, awaiting(), timeout=120)
    first = _review(stack)
    [plan] = [p for p in (tmp_path / "workspaces").rglob(f"{first['digest']}.json") if p.parent.name == ".pko-plans"]
    plan.unlink()

    await kc.create(approval("too-late", namespace, "lost", first["digest"]))
    refused = await e2e.wait_for(kc, APPROVAL, "too-late", namespace,
                                 lambda o: e2e.condition(o, "Accepted").get("reason") == "PlanNotFound", timeout=120)
    accepted = e2e.condition(refused, "Accepted")
    assert accepted["status"] == "False"
    assert accepted["message"].startswith(f"plan {first['digest']} approved by {controlplane.ADMIN_USER} "
                                          "(StackApproval too-late) is no longer in the workspace"), accepted
    stack = await e2e.wait_for(kc, resources.STACK, "lost", namespace,
                               lambda o: awaiting()(o) and _review(o)["preview"] != first["preview"], timeout=120)
    assert not managed.exists(), "something was applied without its plan"
    assert "lastUpdate" not in stack["status"], "a plan that was never run is no failed update"
    events = await e2e.events_of(kc, "lost", namespace)
    assert [(e["type"], e["message"]) for e in events if e["reason"] == "StackPlanLost"] == [
        ("Warning", accepted["message"])]
    assert not [e for e in events if e["reason"] == "StackUpdateFailure"]

    await kc.create(approval("again", namespace, "lost", _review(stack)["digest"]))
    await e2e.wait_for(kc, resources.STACK, "lost", namespace, e2e.is_ready, timeout=120)
    assert managed.read_text() == "v1"
