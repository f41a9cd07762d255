"""A Workspace's initialisation steps show in its status (`Ready=False/Installing`, then `/Initializing`) when they
run long enough to be read, and not when they are over sooner (pko: docs/compatibility.md). Real API server, real
agent, the real Pulumi CLI, a YAML program from a real git server on loopback; the threshold is set for each case,
so the outcome does not depend on how busy the machine is."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pko.controllers.workspace import initialize
from pko.kube import client as kclient
from pko.kube import errors, resources
from pko.testing import gitserver, operator
from pko.testing.waiting import condition

PROGRAM = Path(__file__).parents[1] / "testbed" / "programs" / "config-yaml" / "Pulumi.yaml"


async def _ready_reasons(kc: kclient.Client, git: gitserver.GitServer, namespace: str) -> list[str]:
    """The Ready reasons the Workspace's status went through, in order, until it was Ready."""
    commit = git.create_repo(f"steps-{namespace}", {"Pulumi.yaml": PROGRAM.read_text()})
    seen: list[str] = []
    since = (await kc.list(resources.WORKSPACE, namespace)).resource_version

    async def follow() -> None:
        while True:  # from `since` on, whenever the watch opens: every change of the Workspace is seen
            try:
                async for event in kc.watch(resources.WORKSPACE, namespace, resource_version=since):
                    if event.type == "BOOKMARK":
                        continue
                    ready = condition(event.object, "Ready")
                    if ready.get("reason") and (not seen or seen[-1] != ready["reason"]):
                        seen.append(str(ready["reason"]))
                    if ready.get("status") == "True":
                        return
            except errors.TooManyRequests:  # the API server's cache of a CRD installed a moment ago
                seen.clear()
                await asyncio.sleep(0.2)

    following = asyncio.create_task(follow())
    await kc.create(resources.WORKSPACE.new("steps", namespace, spec={
        "git": {"url": git.http_url(f"steps-{namespace}"), "ref": commit},
        "stacks": [{"name": "dev", "create": True, "config": [{"key": "greeting", "value": "hello"}]}],
    }))
    await asyncio.wait_for(following, 300)
    return seen


@pytest.fixture
def slow_after(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(initialize, "SHOW_STEP_AFTER", request.param)
    return float(request.param)


@pytest.mark.parametrize("slow_after", [0.0], indirect=True)
async def test_steps_longer_than_the_threshold_are_shown_in_order(
    slow_after: float, kc: kclient.Client, namespace: str, git: gitserver.GitServer,
    running_operator: operator.Operator,
) -> None:
    assert await _ready_reasons(kc, git, namespace) == ["Installing", "Initializing", "Succeeded"]


@pytest.mark.parametrize("slow_after", [120.0], indirect=True)
async def test_steps_over_sooner_are_not_written(
    slow_after: float, kc: kclient.Client, namespace: str, git: gitserver.GitServer,
    running_operator: operator.Operator,
) -> None:
    assert await _ready_reasons(kc, git, namespace) == ["Succeeded"]
