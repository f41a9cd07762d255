"""Destroy protection (pko's `spec.destroyProtection`), end to end with the real Pulumi CLI: deleting a
`destroyOnFinalize` Stack first previews the destroy (`pulumi destroy --preview-only`); the Stack shows what would be
deleted and keeps its finalizer until a StackApproval of that preview's digest (or the confirm-destroy annotation)
confirms it; an approval of another digest is refused. At or below the threshold the destroy goes ahead unconfirmed.
With the Go reference agent, which cannot preview a destroy, nothing is deleted and the Stack stalls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import stack_e2e as e2e

from pko.api import names
from pko.kube import client as kclient
from pko.kube import objects, resources
from pko.testing import binaries, controlplane, gitserver, operator, waiting

APPROVAL = resources.STACK_APPROVAL


def _review(obj: objects.Object) -> dict[str, Any]:
    return dict((obj.get("status") or {}).get("approval") or {})


def awaiting_destroy(obj: objects.Object) -> bool:
    review = _review(obj)
    return (review.get("state") == "AwaitingApproval" and review.get("operation") == "destroy"
            and e2e.condition(obj, "AwaitingApproval").get("status") == "True")


async def _protected(kc: kclient.Client, git: gitserver.GitServer, namespace: str, name: str, managed: Path,
                     **protection: Any) -> None:
    """A ready `destroyOnFinalize` Stack with destroy protection that manages the file `managed`."""
    repo = f"{name}-{namespace}"
    commit = e2e.create_repo(git, repo)
    await kc.create(e2e.git_stack(name, namespace, git.http_url(repo), commit=commit, destroyOnFinalize=True,
                                  destroyProtection={"enabled": True, **protection},
                                  config={"path": str(managed), "content": "precious"}))
    await e2e.wait_for(kc, resources.STACK, name, namespace, e2e.is_ready, timeout=120)
    assert managed.read_text() == "precious"


def decided(obj: objects.Object) -> bool:
    return bool(e2e.condition(obj, "Accepted"))


async def _deleted_and_waiting(kc: kclient.Client, name: str, namespace: str) -> dict[str, Any]:
    await kc.delete(resources.STACK, name, namespace)
    return await e2e.wait_for(kc, resources.STACK, name, namespace, awaiting_destroy, timeout=120)


async def test_a_protected_destroy_waits_for_an_approval_of_its_preview(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    tmp_path: Path,
) -> None:
    managed = tmp_path / "guarded.txt"
    await _protected(kc, git, namespace, "guarded", managed)
    stack = await _deleted_and_waiting(kc, "guarded", namespace)

    # The preview deleted nothing; the Stack shows what the destroy would delete and keeps its finalizer.
    review = _review(stack)
    digest = review["digest"]
    assert review["changes"] == {"delete": 2}
    assert any(urn.endswith("::file") for urn in review["resources"]), review["resources"]
    assert managed.read_text() == "precious"
    assert names.FINALIZER in stack["metadata"]["finalizers"]
    message = e2e.condition(stack, "AwaitingApproval")["message"]
    assert "would delete 2 resources" in message
    assert f"{names.ANNOTATION_CONFIRM_DESTROY}={digest}" in message
    previews = [u for u in await e2e.updates_of(kc, "guarded", namespace)
                if (u["metadata"].get("annotations") or {}).get(names.ANNOTATION_PREVIEW_ONLY) == "true"]
    assert [u["spec"]["type"] for u in previews] == ["destroy"]

    # An approval of another digest is refused; the approval of the shown one destroys.
    await kc.create(APPROVAL.new("old", namespace, spec={"stackName": "guarded", "digest": "1" * 64,
                                                         "approvedBy": controlplane.ADMIN_USER}))
    refused = e2e.condition(await e2e.wait_for(kc, APPROVAL, "old", namespace, decided), "Accepted")
    assert (refused["status"], refused["reason"]) == ("False", "DigestMismatch")
    assert managed.exists()
    await kc.create(APPROVAL.new("go", namespace, spec={"stackName": "guarded", "digest": digest,
                                                        "approvedBy": controlplane.ADMIN_USER}))
    await e2e.wait_gone(kc, resources.STACK, "guarded", namespace, timeout=120)
    assert not managed.exists()
    accepted = e2e.condition(await kc.get(APPROVAL, "go", namespace), "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("True", "Applied")
    assert any(e["reason"] == "StackApproved" and f"approved by {controlplane.ADMIN_USER}" in e["message"]
               for e in await e2e.events_of(kc, "guarded", namespace))


async def test_the_annotation_confirms_and_a_small_destroy_needs_no_confirmation(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    tmp_path: Path,
) -> None:
    small, annotated = tmp_path / "small.txt", tmp_path / "annotated.txt"
    await _protected(kc, git, namespace, "small", small, threshold=2)
    await _protected(kc, git, namespace, "annotated", annotated, threshold=1)

    # Two resources to delete, threshold 2: previewed, then destroyed without a confirmation.
    await kc.delete(resources.STACK, "small", namespace)
    await e2e.wait_gone(kc, resources.STACK, "small", namespace, timeout=120)
    assert not small.exists()
    updates = await e2e.updates_of(kc, "small", namespace)
    assert [(u["spec"]["type"], names.ANNOTATION_PREVIEW_ONLY in (u["metadata"].get("annotations") or {}))
            for u in updates if u["spec"]["type"] == "destroy"] == [("destroy", True), ("destroy", False)]
    assert any(e["reason"] == "StackDestroyConfirmed" and "need no confirmation" in e["message"]
               for e in await e2e.events_of(kc, "small", namespace))

    # Two resources, threshold 1: waits; a wrong annotation changes nothing, the right one destroys.
    digest = _review(await _deleted_and_waiting(kc, "annotated", namespace))["digest"]
    before = waiting.reconciles(stack_operator.manager.registry, names.STACK_CONTROLLER)
    await kc.patch(resources.STACK, "annotated",
                   {"metadata": {"annotations": {names.ANNOTATION_CONFIRM_DESTROY: "2" * 64}}}, namespace)
    await waiting.settled(stack_operator.manager.registry, names.STACK_CONTROLLER, after=before)
    stack = await kc.get(resources.STACK, "annotated", namespace)
    assert awaiting_destroy(stack)
    assert annotated.exists()
    assert _review(stack)["digest"] == digest
    await kc.patch(resources.STACK, "annotated",
                   {"metadata": {"annotations": {names.ANNOTATION_CONFIRM_DESTROY: digest}}}, namespace)
    await e2e.wait_gone(kc, resources.STACK, "annotated", namespace, timeout=120)
    assert not annotated.exists()
    assert any(e["reason"] == "StackDestroyConfirmed" and names.ANNOTATION_CONFIRM_DESTROY in e["message"]
               for e in await e2e.events_of(kc, "annotated", namespace))


async def test_with_the_go_agent_a_protected_stack_is_not_destroyed(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, cluster: controlplane.ControlPlane,
    tmp_path: Path, pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    managed = tmp_path / "go.txt"
    agent = str(binaries.require("pko-go-agent"))

    def stalled(obj: objects.Object) -> bool:
        return e2e.reason(obj, "Stalled") == "UpdatePlansUnsupported"

    async with operator.running(cluster.kubeconfig, tmp_path / "workspaces", namespace=namespace,
                                workspace_agent=agent):
        await _protected(kc, git, namespace, "keep", managed)
        await kc.delete(resources.STACK, "keep", namespace)
        stack = await e2e.wait_for(kc, resources.STACK, "keep", namespace, stalled, timeout=120)
    assert "needs a workspace agent that previews a destroy" in e2e.condition(stack, "Stalled")["message"]
    assert managed.read_text() == "precious"
    destroys = [u for u in await e2e.updates_of(kc, "keep", namespace) if u["spec"]["type"] == "destroy"]
    assert len(destroys) == 1
    assert e2e.condition(destroys[0], "Failed")["reason"] == "UpdatePlansUnsupported"
