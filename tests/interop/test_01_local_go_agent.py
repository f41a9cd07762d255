"""pko's operator with the Go reference agent as the `local` runtime's agent (`--workspace-agent`): the operator
in-process against the session's control plane, the Go `agent init` fetching each source and `agent serve`
answering pko's operator over the shared protocol. A Program Stack through a config change and destroy on delete,
and a Git-sourced Python Stack. No cluster: this file runs before the tier's cluster starts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import binaries, controlplane, crossrun, gitserver, operator
from pko.testing.waiting import condition, wait_for, wait_gone

PASSPHRASE = {"type": "Literal", "literal": {"value": "interop-passphrase"}}
PROJECT = "name: pyproj\nruntime: python\n"  # the session's interpreter (no virtualenv: no index to install from)


@pytest.fixture
async def go_agent_operator(cluster: controlplane.ControlPlane, namespace: str, tmp_path: Path,
                            pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
                            ) -> AsyncIterator[operator.Operator]:
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    agent = str(binaries.require("pko-go-agent"))
    async with operator.running(cluster.kubeconfig, tmp_path / "workspaces", namespace=namespace,
                                workspace_agent=agent) as op:
        yield op


def ready_with(key: str, value: Any) -> Callable[[dict[str, Any]], bool]:
    def test(obj: dict[str, Any]) -> bool:
        return (condition(obj, "Ready").get("status") == "True"
                and ((obj.get("status") or {}).get("outputs") or {}).get(key) == value)
    return test


def go_agent_ran(tmp_path: Path, namespace: str, name: str) -> str:
    """The log of the agent that served `name`: the Go agent logs JSON with its own messages."""
    logs = sorted((tmp_path / "workspaces" / namespace / name).glob("*/agent.log"))
    assert logs, f"no agent ran for {namespace}/{name}"
    return logs[-1].read_text()


async def test_program_stack_with_the_go_agent(kc: kclient.Client, namespace: str, tmp_path: Path,
                                               go_agent_operator: operator.Operator) -> None:
    await kc.create(resources.PROGRAM.new("hello", namespace, program=crossrun.PROGRAM))
    await kc.create(resources.STACK.new("hello", namespace, spec={
        "stack": "dev", "programRef": {"name": "hello"}, "envRefs": {"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE},
        "config": {"greeting": "one"}, "destroyOnFinalize": True,
    }))
    stack = await wait_for(kc, resources.STACK, "hello", namespace, ready_with("greeting", "one"))
    assert stack["status"]["outputs"] == {"greeting": "one", "token": "[secret]"}
    log = go_agent_ran(tmp_path, namespace, "hello")
    assert "Pulumi Kubernetes Agent" in log, log
    assert "(pko " not in log, "pko's own agent ran, not the Go one"

    await kc.patch(resources.STACK, "hello", {"spec": {"config": {"greeting": "two"}}}, namespace)
    stack = await wait_for(kc, resources.STACK, "hello", namespace, ready_with("greeting", "two"))
    assert stack["status"]["lastUpdate"]["state"] == "succeeded"

    await kc.delete(resources.STACK, "hello", namespace)
    await wait_gone(kc, resources.STACK, "hello", namespace)
    # the Go agent ran the destroy (this control plane has no garbage collector: the Updates stay to be read)
    updates = (await kc.list(resources.UPDATE, namespace)).items
    destroys = [u for u in updates if u["spec"]["type"] == "destroy"]
    assert [condition(u, "Failed").get("status") for u in destroys] == ["False"], destroys


async def test_git_python_stack_with_the_go_agent(kc: kclient.Client, namespace: str, tmp_path: Path,
                                                  git: gitserver.GitServer,
                                                  go_agent_operator: operator.Operator) -> None:
    repo = f"py-{namespace}"
    git.create_repo(repo, {"Pulumi.yaml": PROJECT, "__main__.py": crossrun.PYTHON_PROGRAM})
    await kc.create(resources.STACK.new("py", namespace, spec={
        "stack": "dev", "projectRepo": git.http_url(repo), "branch": "main",
        "envRefs": {"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE}, "config": {"who": "the Go agent"},
        "destroyOnFinalize": True,
    }))
    stack = await wait_for(kc, resources.STACK, "py", namespace, ready_with("greeting", "hello from the Go agent"))
    assert stack["status"]["outputs"]["secret"] == "[secret]"
    assert stack["status"]["projectInfo"] == {"name": "pyproj", "runtime": "python"}
    await kc.delete(resources.STACK, "py", namespace)
    await wait_gone(kc, resources.STACK, "py", namespace)
