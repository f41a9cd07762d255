"""Workspace and Update controllers end to end on the `local` runtime: real API server, real agent processes (forked
from the agent fork server, pko's default, and exec'd, `--workspace-agent-fork=false`), the real Pulumi CLI, a
program fetched from a real git server on loopback."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from pko.api import names
from pko.controllers import settings as operator_settings
from pko.controllers.workspace import forks
from pko.kube import client as kclient
from pko.kube import objects, owners, resources
from pko.testing import gitserver, operator
from pko.testing.waiting import condition, eventually, wait_for

PROGRAMS = Path(__file__).parents[1] / "testbed" / "programs"
FAILING = """import pulumi
raise RuntimeError("the program refuses to run: boom")
"""


def _repo(git: gitserver.GitServer, name: str) -> str:
    files = {f"good/{p.name}": p.read_text() for p in (PROGRAMS / "files-python").iterdir() if p.is_file()}
    files["bad/Pulumi.yaml"] = "name: failing\nruntime: python\n"
    files["bad/__main__.py"] = FAILING
    return git.create_repo(name, files)


def _workspace(name: str, namespace: str, url: str, commit: str, directory: str, config: list[dict[str, Any]]
               ) -> dict[str, Any]:
    return resources.WORKSPACE.new(name, namespace, spec={
        "git": {"url": url, "ref": commit, "dir": directory},
        "stacks": [{"name": "dev", "create": True, "config": config}],
    })


def _update(name: str, workspace: dict[str, Any], kind: str = "up") -> dict[str, Any]:
    update = resources.UPDATE.new(name, objects.namespace_of(workspace), spec={
        "workspaceName": objects.name_of(workspace), "stackName": "dev", "type": kind, "ttlAfterCompleted": "1h",
    })
    return owners.set_controller_reference(update, workspace)


@pytest.fixture(params=["forked", "exec"])
def agent_start(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How the operator started in this test starts its agents."""
    if request.param == "exec":
        made = operator_settings.from_environment

        def from_environment(version: str, environ: Any = None, **given: Any) -> operator_settings.Settings:
            return made(version, environ, **(given | {"workspace_agent_fork": False}))

        monkeypatch.setattr(operator_settings, "from_environment", from_environment)
    return str(request.param)


@pytest.fixture
def started_operator(agent_start: str, running_operator: operator.Operator) -> operator.Operator:
    return running_operator


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")


async def test_git_workspace_runs_an_up_with_outputs(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, agent_start: str,
    started_operator: operator.Operator, tmp_path: Path,
) -> None:
    running_operator = started_operator
    commit = _repo(git, f"files-{namespace}")
    target = tmp_path / "greeting.txt"
    ws = await kc.create(_workspace("files", namespace, git.http_url(f"files-{namespace}"), commit, "good", [
        {"key": "path", "value": str(target)},
        {"key": "content", "value": "hello from a workspace"},
        {"key": "token", "value": "s3cr3t", "secret": True},
    ]))

    ready = await wait_for(kc, resources.WORKSPACE, "files", namespace,
                        lambda o: condition(o, "Ready").get("status") == "True")
    assert ready["status"]["pulumiVersion"].lstrip("v") == "3.259.0"
    assert ready["status"]["address"].startswith("127.0.0.1:")
    assert condition(ready, "Ready")["reason"] == "Succeeded"

    await kc.create(_update("files-up", ws))
    done = await wait_for(kc, resources.UPDATE, "files-up", namespace,
                       lambda o: condition(o, "Complete").get("status") == "True")
    assert condition(done, "Failed")["status"] == "False", done["status"]
    assert condition(done, "Failed")["reason"] == "UpdateSucceeded"
    assert done["status"]["startTime"]
    assert done["status"]["endTime"]
    assert done["status"]["projectInfo"] == {"name": "files-python", "runtime": "python"}
    assert target.read_text() == "hello from a workspace"

    secret = await kc.get(resources.SECRET, done["status"]["outputs"], namespace)
    assert secret["metadata"]["name"] == "files-up-stack-outputs"
    assert secret["immutable"] is True
    assert json.loads(secret["metadata"]["annotations"][names.ANNOTATION_SECRETS]) == ["token"]
    values = {k: json.loads(base64.b64decode(v)) for k, v in secret["data"].items()}
    assert values == {"path": str(target), "content": "hello from a workspace", "token": "s3cr3t"}
    # owned by the Update, not controlled, exactly as the Go operator writes it (compared in tests/interop)
    assert owners.controller_of(secret) is None
    assert [(r["kind"], r["name"]) for r in secret["metadata"]["ownerReferences"]] == [("Update", "files-up")]
    assert set(secret["metadata"]["ownerReferences"][0]) == {"apiVersion", "kind", "name", "uid"}

    # Deleting the Workspace stops its agent processes.
    agent = running_operator.controllers.local_runtime.get(objects.key_of(ws))  # type: ignore[union-attr]
    assert agent is not None
    pid = agent.process.pid
    assert isinstance(agent.process, forks.ForkedAgent) == (agent_start == "forked")
    argv = _cmdline(pid)  # forked or not, it shows as the agent it is (what ps, the bench and the chaos tier read)
    assert argv[argv.index("agent") + 1] == "serve"
    assert argv[argv.index("--kube-workspace-name") + 1] == "files"
    # it said on its ready pipe when its fetch was over (the fetch phase's time) and when it listened
    ready_fd = argv[argv.index("--ready-fd") + 1]
    assert ready_fd == "3" if agent_start == "forked" else int(ready_fd) > 2
    assert agent.fetch_seconds is not None
    assert os.getsid(pid) == pid  # a session of its own: a killpg reaches what it started
    await kc.delete(resources.WORKSPACE, "files", namespace)
    await asyncio.wait_for(agent.process.wait(), 60)
    assert not _pid_alive(pid)
    # and its directory (the fetched source, its env file, its log) goes with it
    # (moved aside at once, so a start at the same revision never meets it, then removed)
    await eventually(lambda: not agent.directory.exists() and not list(agent.directory.parent.glob("*.stopped-*")),
                     "the stopped agent's directory removed", timeout=30)


async def test_failing_program_marks_the_update_failed(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, running_operator: operator.Operator,
) -> None:
    commit = _repo(git, f"failing-{namespace}")
    ws = await kc.create(_workspace("failing", namespace, git.http_url(f"failing-{namespace}"), commit, "bad", []))
    await wait_for(kc, resources.WORKSPACE, "failing", namespace,
                lambda o: condition(o, "Ready").get("status") == "True")

    await kc.create(_update("failing-up", ws))
    done = await wait_for(kc, resources.UPDATE, "failing-up", namespace,
                       lambda o: condition(o, "Complete").get("status") == "True")
    failed = condition(done, "Failed")
    assert failed["status"] == "True"
    assert "the program refuses to run: boom" in done["status"]["message"]
    assert done["status"]["outputs"] == ""  # no Secret (written empty, as by the Go operator)


async def test_a_fetch_that_fails_is_the_workspace_status_and_no_agent_is_left(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, agent_start: str,
    started_operator: operator.Operator,
) -> None:
    """The agent exits after its fetch failed (no such repository on the git server): the start ends with the
    fetch's error in the Workspace's Ready condition, whether the agent's ready pipe or its exit tells first, and
    nothing of that start keeps running."""
    commit = _repo(git, f"present-{namespace}")
    await kc.create(_workspace("unfetched", namespace, git.http_url(f"absent-{namespace}"), commit, "good", []))
    seen = await wait_for(kc, resources.WORKSPACE, "unfetched", namespace,
                          lambda o: "fetching the source failed" in condition(o, "Ready").get("message", ""),
                          timeout=120)
    assert condition(seen, "Ready")["status"] == "False"
    runtime = started_operator.controllers.local_runtime
    assert runtime is not None
    assert runtime.get(objects.ObjectKey(namespace, "unfetched")) is None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
