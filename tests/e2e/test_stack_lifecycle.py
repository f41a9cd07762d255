"""A Stack's life cycle, end to end: `destroyOnFinalize` destroys the stack's resources (a real file made by a
dynamic provider) before the finalizer goes, and a destroy that fails keeps the finalizer and is retried with
backoff until it succeeds; `workspaceReclaimPolicy: Delete` removes the Workspace after a success; `preview: true`
only ever previews and never destroys."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import stack_e2e as e2e

from pko.api import names
from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import gitserver, operator


async def test_destroy_on_finalize_retries_a_failed_destroy_until_it_succeeds(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    tmp_path: Path,
) -> None:
    repo = f"lifecycle-{namespace}"
    commit = e2e.create_repo(git, repo)
    target, guard = tmp_path / "doomed.txt", tmp_path / "guard"
    preview_target = tmp_path / "previewed.txt"
    await kc.create(e2e.git_stack("doomed", namespace, git.http_url(repo), commit=commit, destroyOnFinalize=True,
                                  retryMaxBackoffDurationSeconds=3,
                                  config={"path": str(target), "content": "doomed", "guard": str(guard)}))
    await kc.create(e2e.git_stack("previewer", namespace, git.http_url(repo), commit=commit, preview=True,
                                  destroyOnFinalize=True, workspaceReclaimPolicy="Delete",
                                  config={"path": str(preview_target)}))

    doomed = await e2e.wait_for(kc, resources.STACK, "doomed", namespace, e2e.is_ready)
    assert target.read_text() == "doomed"
    assert doomed["status"]["outputs"]["path"] == str(target)

    # Preview only: the Update is a preview, nothing is created, and the Workspace goes after the success.
    previewer = await e2e.wait_for(kc, resources.STACK, "previewer", namespace, e2e.is_ready)
    assert e2e.last_update(previewer)["type"] == "preview"
    assert not preview_target.exists()
    await e2e.wait_gone(kc, resources.WORKSPACE, "previewer", namespace, timeout=60)
    events = await e2e.events_of(kc, "previewer", namespace)
    assert any(e["reason"] == "WorkspaceDeleted" and e["type"] == "Normal" for e in events)
    # Asked to run again, it previews again (in a new Workspace, removed again afterwards).
    first_preview = e2e.last_update(previewer)["name"]
    await e2e.request_reconcile(kc, "previewer", namespace, "again")
    previewer = await e2e.wait_for(kc, resources.STACK, "previewer", namespace,
                                   lambda o: e2e.is_ready(o) and e2e.last_update(o)["name"] != first_preview)
    assert e2e.last_update(previewer)["type"] == "preview"
    assert not preview_target.exists()
    await e2e.wait_gone(kc, resources.WORKSPACE, "previewer", namespace, timeout=60)
    # Deleting a preview Stack destroys nothing, even with destroyOnFinalize.
    await kc.delete(resources.STACK, "previewer", namespace)
    await e2e.wait_gone(kc, resources.STACK, "previewer", namespace, timeout=60)
    previews = await e2e.updates_of(kc, "previewer", namespace)
    assert [u["spec"]["type"] for u in previews] == ["preview", "preview"]

    # The destroy fails while the guard file exists: the Stack stays, with its finalizer, and retries.
    guard.write_text("keep")
    await kc.delete(resources.STACK, "doomed", namespace)

    def destroy_failed(times: int) -> Callable[[dict[str, Any]], bool]:
        def test(obj: dict[str, Any]) -> bool:
            last = e2e.last_update(obj)
            return last.get("type") == "destroy" and last.get("state") == "failed" and last.get("failures", 0) >= times
        return test

    failing = await e2e.wait_for(kc, resources.STACK, "doomed", namespace, destroy_failed(0))
    assert failing["metadata"]["deletionTimestamp"]
    assert failing["metadata"]["finalizers"] == [names.FINALIZER]
    assert "guard file" in e2e.last_update(failing)["message"]
    assert target.read_text() == "doomed", "a failed destroy left the resource alone"
    failing = await e2e.wait_for(kc, resources.STACK, "doomed", namespace, destroy_failed(1))
    assert e2e.condition(failing, "Reconciling")["reason"] == "RetryingAfterFailure"
    assert failing["metadata"]["finalizers"] == [names.FINALIZER]
    assert target.exists()

    # Without the guard the next retry destroys the file, and only then does the Stack go.
    guard.unlink()
    await e2e.wait_gone(kc, resources.STACK, "doomed", namespace)
    assert not target.exists(), "the stack's resources were destroyed before the finalizer was removed"
    updates = await e2e.updates_of(kc, "doomed", namespace)
    destroys = [u for u in updates if u["spec"]["type"] == "destroy"]
    assert len(destroys) >= 3
    assert [e2e.condition(u, "Failed")["status"] for u in destroys][-1] == "False"
    assert all(e2e.condition(u, "Failed")["status"] == "True" for u in destroys[:-1])
    assert destroys[0]["spec"]["message"] == "Stack marked for deletion"
    assert destroys[1]["spec"]["message"] == "Backoff time elapsed: 3s"
