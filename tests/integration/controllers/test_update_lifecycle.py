"""An Update's life on the `local` runtime (pko-v2 §3.3): TTL expiry after completion, an operation interrupted by
an operator restart is Aborted, an Update nobody owns is Canceled, and every operation type completes with the
right conditions. Real API server, real agent processes, the real Pulumi CLI, a real git server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pko.api import names
from pko.kube import client as kclient
from pko.kube import objects, owners, resources
from pko.testing import controlplane, gitserver, operator, waiting

PROGRAM = Path(__file__).parents[1] / "testbed" / "programs" / "files-python"


@pytest.fixture(autouse=True)
async def _delete_our_objects(kc: kclient.Client, namespace: str) -> AsyncIterator[None]:
    """Delete this test's Workspaces and Updates once its operator has stopped. This control plane has no
    namespace controller, so deleting the namespace leaves them behind, and the next test's operator (which watches
    every namespace) would start agents for them, in that test's Pulumi backend."""
    yield
    for kind in (resources.UPDATE, resources.WORKSPACE):
        for obj in (await kc.list(kind, namespace)).items:
            await kc.delete(kind, objects.name_of(obj), namespace, missing_ok=True)


def _condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def _complete(obj: dict[str, Any] | None) -> bool:
    return _condition(obj, "Complete").get("status") == "True"


def _summary(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {t: (_condition(obj, t).get("status", ""), _condition(obj, t).get("reason", ""))
            for t in ("Progressing", "Failed", "Complete")}


SUCCEEDED = {"Progressing": ("False", "Complete"), "Failed": ("False", "UpdateSucceeded"),
             "Complete": ("True", "Updated")}


async def _files_workspace(kc: kclient.Client, git: gitserver.GitServer, namespace: str, name: str,
                           target: Path) -> dict[str, Any]:
    """A Ready Workspace on the files-python program, whose one resource is the file `target`."""
    repo = f"{name}-{namespace}"
    commit = git.create_repo(repo, {p.name: p.read_text() for p in PROGRAM.iterdir() if p.is_file()})
    ws = await kc.create(resources.WORKSPACE.new(name, namespace, spec={
        "git": {"url": git.http_url(repo), "ref": commit},
        "stacks": [{"name": "dev", "create": True, "config": [
            {"key": "path", "value": str(target)},
            {"key": "content", "value": "lifecycle"},
            {"key": "token", "value": "t0ken", "secret": True},
        ]}],
    }))
    await waiting.wait_for(kc, resources.WORKSPACE, name, namespace,
                           lambda o: _condition(o, "Ready").get("status") == "True", timeout=240)
    return ws


def _update(name: str, workspace: dict[str, Any], kind: str = "up", *, owned: bool = True,
            **spec: Any) -> dict[str, Any]:
    update = resources.UPDATE.new(name, objects.namespace_of(workspace), spec={
        "workspaceName": objects.name_of(workspace), "stackName": "dev", "type": kind, **spec,
    })
    return owners.set_controller_reference(update, workspace) if owned else update


async def _events(kc: kclient.Client, namespace: str, name: str) -> list[dict[str, Any]]:
    listing = await kc.list(resources.EVENT, namespace)
    return [e for e in listing.items if (e.get("involvedObject") or {}).get("name") == name]


async def _events_once(kc: kclient.Client, namespace: str, name: str, reason: str,
                       timeout: float = 30.0) -> list[dict[str, Any]]:
    """The events about `name`, once one of `reason` is among them: the Update controller posts its events after
    the write the test waits for (the status, the deletion), so a test waits for the event instead of racing it."""
    found: list[dict[str, Any]] = []

    async def posted() -> bool:
        found[:] = await _events(kc, namespace, name)
        return any(e["reason"] == reason for e in found)

    await waiting.eventually(posted, f"a {reason} event of {namespace}/{name}", timeout, interval=0.2)
    return found


async def test_completed_update_expires_after_its_ttl(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, running_operator: operator.Operator,
    tmp_path: Path,
) -> None:
    ws = await _files_workspace(kc, git, namespace, "ttl", tmp_path / "ttl.txt")
    await kc.create(_update("ttl-up", ws, ttlAfterCompleted="5s"))

    done = await waiting.wait_for(kc, resources.UPDATE, "ttl-up", namespace, _complete, timeout=240)
    seen_complete = time.monotonic()
    assert _summary(done) == SUCCEEDED, done["status"]
    uid = done["metadata"]["uid"]
    outputs = done["status"]["outputs"]

    await waiting.wait_gone(kc, resources.UPDATE, "ttl-up", namespace, timeout=60)
    lived = time.monotonic() - seen_complete
    # Complete's lastTransitionTime has whole seconds, and we saw it up to one poll late: allow 1.5 s of slack.
    assert lived >= 5 - 1.5, f"deleted {lived:.1f}s after completing, before its 5s TTL"

    # The event is posted after the deletion the test just saw: waited for.
    expired = [e for e in await _events_once(kc, namespace, "ttl-up", "UpdateExpired")
               if e["reason"] == "UpdateExpired"]
    assert len(expired) == 1, expired
    assert expired[0]["type"] == "Normal"
    assert expired[0]["involvedObject"]["kind"] == "Update"
    assert expired[0]["involvedObject"]["uid"] == uid
    assert expired[0]["source"]["component"] == "update-controller"
    # The outputs Secret still exists (with no kube-controller-manager, nothing garbage-collects it here).
    assert await kc.get_or_none(resources.SECRET, outputs, namespace) is not None
    # The Workspace is untouched.
    assert await kc.get_or_none(resources.WORKSPACE, "ttl", namespace) is not None


async def test_update_found_progressing_when_the_operator_starts_is_aborted(
    kc: kclient.Client, namespace: str, cluster: controlplane.ControlPlane, tmp_path: Path,
    pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    target = tmp_path / "never.txt"
    ws = await kc.create(resources.WORKSPACE.new("restarted", namespace, spec={
        "projectInfo": {"name": "restarted", "runtime": "yaml"}, "stacks": [{"name": "dev", "create": True}],
    }))
    await kc.create(_update("interrupted", ws))
    # What an operator that died in the middle of the operation left behind.
    await kc.apply_status({
        "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update",
        "metadata": {"name": "interrupted", "namespace": namespace},
        "status": {"observedGeneration": 1, "conditions": [
            {"type": "Progressing", "status": "True", "reason": "Progressing", "message": "",
             "lastTransitionTime": "2025-01-01T00:00:00Z", "observedGeneration": 1},
            {"type": "Failed", "status": "False", "reason": "Progressing", "message": "",
             "lastTransitionTime": "2025-01-01T00:00:00Z", "observedGeneration": 1},
            {"type": "Complete", "status": "False", "reason": "Progressing", "message": "",
             "lastTransitionTime": "2025-01-01T00:00:00Z", "observedGeneration": 1},
        ]},
    }, field_manager=names.FIELD_MANAGER_UPDATE_STATUS)

    async with operator.running(cluster.kubeconfig, tmp_path / "workspaces", workers=2, namespace=namespace) as op:
        done = await waiting.wait_for(kc, resources.UPDATE, "interrupted", namespace, _complete, timeout=60)
        assert _summary(done) == {"Progressing": ("False", "Failed"), "Failed": ("True", "Aborted"),
                                  "Complete": ("True", "Failed")}
        # It was not run again: no operation times, no outputs, once the Update controller is done with it.
        await waiting.settled(op.manager.registry, names.UPDATE_CONTROLLER, after=0)
        again = await kc.get(resources.UPDATE, "interrupted", namespace)
        assert again["status"]["conditions"] == done["status"]["conditions"]
        for key in ("startTime", "endTime"):
            assert key not in again["status"], key
        assert again["status"]["outputs"] == "", "no outputs (written empty, as the Go operator writes it)"
    assert not target.exists()


async def test_update_without_a_controller_owner_is_canceled(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, running_operator: operator.Operator,
    tmp_path: Path,
) -> None:
    target = tmp_path / "canceled.txt"
    ws = await _files_workspace(kc, git, namespace, "unowned", target)
    await kc.create(_update("orphan", ws, owned=False))

    done = await waiting.wait_for(kc, resources.UPDATE, "orphan", namespace, _complete, timeout=60)
    assert _summary(done) == {"Progressing": ("False", "Failed"), "Failed": ("True", "Canceled"),
                              "Complete": ("True", "Failed")}
    assert "endTime" not in done["status"]
    assert done["status"]["outputs"] == ""  # no Secret (written empty, as by the Go operator)
    assert not target.exists()  # the program never ran


async def test_status_writes_alone_do_not_bring_an_update_back(
    kc: kclient.Client, namespace: str, running_operator: operator.Operator,
) -> None:
    """The Update controller's own status writes (and anybody's) are no reason to look at an Update again; a change
    of what it reads (here a label) is. Each was a reconcile that changed nothing, several an Update in a fleet."""
    registry = running_operator.manager.registry
    nowhere = {"metadata": {"name": "nowhere", "namespace": namespace}}
    await kc.create(_update("quiet", nowhere, owned=False))  # canceled at once: nobody owns it
    await waiting.wait_for(kc, resources.UPDATE, "quiet", namespace, _complete, timeout=60)
    # two reconciles: its creation (canceled) and its becoming Complete (the TTL's wait); then none is due
    await waiting.settled(registry, names.UPDATE_CONTROLLER, after=1)
    before = waiting.reconciles(registry, names.UPDATE_CONTROLLER)
    for note in range(5):
        await kc.apply_status({"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update",
                               "metadata": {"name": "quiet", "namespace": namespace},
                               "status": {"message": f"note {note}"}}, field_manager="a-test")
    await waiting.wait_for(kc, resources.UPDATE, "quiet", namespace,
                           lambda o: (o or {}).get("status", {}).get("message") == "note 4", timeout=30)
    await asyncio.sleep(2)  # what the five writes would have queued has had its time
    assert waiting.reconciles(registry, names.UPDATE_CONTROLLER) == before

    await kc.patch(resources.UPDATE, "quiet", {"metadata": {"labels": {"looked-at": "again"}}}, namespace)
    await waiting.settled(registry, names.UPDATE_CONTROLLER, after=before)


async def test_preview_up_refresh_destroy_complete(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, running_operator: operator.Operator,
    tmp_path: Path,
) -> None:
    target = tmp_path / "types.txt"
    ws = await _files_workspace(kc, git, namespace, "types", target)

    async def run(name: str, kind: str) -> dict[str, Any]:
        await kc.create(_update(name, ws, kind, ttlAfterCompleted="1h"))
        done = await waiting.wait_for(kc, resources.UPDATE, name, namespace, _complete, timeout=240)
        assert _summary(done) == SUCCEEDED, done["status"]
        status = done["status"]
        assert status["startTime"] <= status["endTime"]
        assert status["projectInfo"] == {"name": "files-python", "runtime": "python"}
        assert status["observedGeneration"] == done["metadata"]["generation"]
        return done

    preview = await run("types-preview", "preview")
    assert not target.exists()  # a preview changes nothing
    assert preview["status"]["outputs"] == ""  # no Secret (written empty, as by the Go operator)

    registry = running_operator.manager.registry
    await waiting.settled(registry, names.UPDATE_CONTROLLER, after=0)
    before = waiting.reconciles(registry, names.UPDATE_CONTROLLER)
    up = await run("types-up", "up")
    assert target.read_text() == "lifecycle"
    # two looks: its creation (the operation starts) and its becoming Complete (the TTL's wait); the end of the
    # operation asks for none of its own, which was a third
    await waiting.settled(registry, names.UPDATE_CONTROLLER, after=before + 1)
    await asyncio.sleep(1)
    assert waiting.reconciles(registry, names.UPDATE_CONTROLLER) == before + 2
    assert up["status"]["outputs"] == "types-up-stack-outputs"

    target.write_text("changed behind pulumi's back")
    refresh = await run("types-refresh", "refresh")
    assert refresh["status"]["outputs"] == ""  # no Secret (written empty, as by the Go operator)

    destroy = await run("types-destroy", "destroy")
    assert not target.exists()  # destroy deleted the program's one resource
    assert destroy["status"]["outputs"] == ""  # no Secret (written empty, as by the Go operator)

    for name in ("types-preview", "types-up", "types-refresh", "types-destroy"):
        # posted after the status each `run` waited for: the last one's may still be on its way
        reasons = [e["reason"] for e in await _events_once(kc, namespace, name, "UpdateSucceeded")]
        assert reasons == ["UpdateSucceeded"], (name, reasons)
