"""Hostile git sources, end to end: a Stack whose `projectRepo` is a command (`ext::`), a local path (`file://`)
or an option (`--upload-pack=…`) is Stalled with SpecInvalid and a StackConfigInvalid event, and nothing is run;
a Stack whose git server accepts the connection and never answers is Stalled with SourceUnavailable ("timed out")
within a bounded time, and the operator keeps reconciling other Stacks meanwhile (no worker is held); a Stack on a
repository larger than its workspace's `GIT_MAX_FETCH_SIZE_BYTES` never becomes Ready and carries the agent's
precise refusal, until the cap is raised."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import stack_e2e as e2e

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import controlplane, gitserver, operator, waiting

pytestmark = [pytest.mark.controlplane]

GIT_TIMEOUT = 2.0


@pytest.fixture
async def hostile_operator(cluster: controlplane.ControlPlane, namespace: str, tmp_path: Path,
                           pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
                           ) -> AsyncIterator[operator.Operator]:
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    async with operator.running(cluster.kubeconfig, tmp_path / "workspaces", namespace=namespace,
                                git_timeout=GIT_TIMEOUT, workers=2) as op:
        yield op


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A TCP listener on loopback that accepts and never answers (a hung git server)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield listener.getsockname()[1]
    listener.close()
    for conn in held:
        conn.close()


@pytest.mark.parametrize(("url", "why"), [
    ("ext::sh -c touch% /tmp/pko-pwned", "remote helpers"),
    ("file:///etc", "scheme 'file'"),
    ("--upload-pack=touch /tmp/pko-pwned", "starts with '-'"),
    ("ssh://-oProxyCommand=touch%20/tmp/pko-pwned/repo", "starting with '-'"),
], ids=["ext", "file", "upload-pack", "ssh-option-host"])
async def test_hostile_repository_url_is_spec_invalid(kc: kclient.Client, namespace: str,
                                                      hostile_operator: operator.Operator, url: str,
                                                      why: str) -> None:
    await kc.create(e2e.git_stack("hostile", namespace, url, branch="main"))
    stack = await waiting.wait_for(kc, resources.STACK, "hostile", namespace,
                                   lambda o: e2e.reason(o, "Stalled") == "SpecInvalid", timeout=60)
    message = waiting.condition(stack, "Stalled").get("message", "")
    assert "unsupported git repository URL" in message
    assert why in message
    events = await e2e.events_of(kc, "hostile", namespace)
    assert any(e["reason"] == "StackConfigInvalid" and why in e["message"] for e in events), events
    assert not Path("/tmp/pko-pwned").exists()
    assert (await kc.list(resources.WORKSPACE, namespace)).items == []


async def test_silent_git_server_gives_a_timed_out_condition(kc: kclient.Client, namespace: str,
                                                            hostile_operator: operator.Operator,
                                                            silent_port: int) -> None:
    """Three Stacks on a silent server with only two workers: if a worker hung, the third would never get a
    condition. Each must be SourceUnavailable, saying it timed out, within a few timeouts."""
    started = time.monotonic()
    for index in range(3):
        await kc.create(e2e.git_stack(f"silent-{index}", namespace, f"http://127.0.0.1:{silent_port}/repo.git",
                                      branch="main"))
    for index in range(3):
        stack = await waiting.wait_for(kc, resources.STACK, f"silent-{index}", namespace,
                                       lambda o: e2e.reason(o, "Stalled") == "SourceUnavailable", timeout=60)
        message = waiting.condition(stack, "Stalled").get("message", "")
        assert "timed out" in message, message
    assert time.monotonic() - started < 30 * GIT_TIMEOUT


def _with_git_cap(cap: str) -> dict[str, Any]:
    """A workspace template setting the `fetch` init container's size cap (the podTemplate merges by name)."""
    return {"spec": {"podTemplate": {"spec": {
        "initContainers": [{"name": "fetch", "env": [{"name": "GIT_MAX_FETCH_SIZE_BYTES", "value": cap}]}],
        "containers": [{"name": "pulumi"}]}}}}


def _conditions(obj: dict[str, Any]) -> str:
    return json.dumps((obj.get("status") or {}).get("conditions") or [])


async def test_oversized_repository_gives_a_precise_condition_until_the_cap_is_raised(
        kc: kclient.Client, namespace: str, git: gitserver.GitServer, hostile_operator: operator.Operator) -> None:
    repo = f"big-{namespace}"
    commit = git.create_repo(repo, {**e2e.program_files(marker="big"), "blob.bin": os.urandom(1024 * 1024)})
    url = git.http_url(repo)
    words = (f"unable to fetch git source: {url} sent more than 65536 bytes of pack data, the size cap "
             "(GIT_MAX_FETCH_SIZE_BYTES)")
    await kc.create(e2e.git_stack("big", namespace, url, commit=commit, workspaceTemplate=_with_git_cap("65536")))

    workspace = await waiting.wait_for(kc, resources.WORKSPACE, "big", namespace,
                                       lambda o: words in _conditions(o), timeout=90)
    assert waiting.condition(workspace, "Ready").get("status") != "True"
    stack = await waiting.wait_for(kc, resources.STACK, "big", namespace, lambda o: words in _conditions(o),
                                   timeout=30)
    reconciling = waiting.condition(stack, "Reconciling")
    assert reconciling.get("message", "").startswith("waiting for workspace readiness: "), reconciling
    assert waiting.condition(stack, "Ready").get("status") != "True"
    assert e2e.last_update(stack) == {}
    events = await e2e.events_with(kc, "big", namespace, "WorkspaceNotReady")
    assert all(words in e["message"] and e["type"] == "Warning" for e in events), events

    # The operator keeps working: with the cap raised, the same Stack checks out and deploys.
    await kc.patch(resources.STACK, "big", {"spec": {"workspaceTemplate": _with_git_cap(str(4 * 1024 * 1024))}},
                   namespace)
    stack = await waiting.wait_for(kc, resources.STACK, "big", namespace, e2e.is_ready, timeout=180)
    assert e2e.last_update(stack)["lastSuccessfulCommit"] == commit
    assert stack["status"]["outputs"]["marker"] == "big"
