"""pko's workspace fleet features, end to end on the real control plane with agents as local processes.

Config without a new pod (PKO#965): changing a Stack's `config` / `configRef` values runs the Update with the new
values on the *same* agent process (the local runtime's stand-in for the pod), and the Workspace's
`status.applied` says which generation's config the agent has; a change that needs a new pod (an env var) still
starts a new one. Scale to zero (PKO#1318, PKO#694): with `workspaceIdleTimeout` the Workspace sleeps once idle —
no agent process, `Ready=True/Sleeping`, the Stack still Ready and `kubectl pko get` saying so — and a resync wakes
it, runs, and it sleeps again. A meaningless idle timeout is refused by the API server with its message."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import stack_e2e as e2e

from pko.api import names
from pko.kube import client as kclient
from pko.kube import errors, objects, resources
from pko.testing import controlplane, gitserver, operator

SCRIPT = Path(sys.executable).parent / "kubectl-pko"


def _applied(ws: dict[str, Any]) -> dict[str, Any]:
    return dict((ws.get("status") or {}).get("applied") or {})


def _workspace_reason(ws: dict[str, Any]) -> str | None:
    return e2e.condition(ws, "Ready").get("reason")


async def _events(kc: kclient.Client, name: str, namespace: str) -> list[str]:
    """The Workspace's event reasons, oldest first, each as often as it was told (an Event told again is one
    object with a count, as client-go's recorder makes it)."""
    found = await e2e.events_of(kc, name, namespace, kind="Workspace")
    found.sort(key=lambda e: (e.get("eventTime") or e.get("firstTimestamp") or "", e["metadata"]["name"]))
    return [e["reason"] for e in found for _ in range(int(e.get("count") or 1))]


async def _events_until(kc: kclient.Client, name: str, namespace: str, test: Callable[[list[str]], bool],
                        timeout: float = 60.0) -> list[str]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        reasons = await _events(kc, name, namespace)
        if test(reasons) or asyncio.get_running_loop().time() > deadline:
            return reasons
        await asyncio.sleep(0.5)


async def _no_agent(runtime: Any, key: objects.ObjectKey, timeout: float = 30.0) -> None:
    """The status says Sleeping first, then the agent is stopped: wait (briefly) for the process to be gone."""
    deadline = asyncio.get_running_loop().time() + timeout
    while runtime.get(key) is not None:
        assert asyncio.get_running_loop().time() < deadline, f"{key}: the agent still runs while Sleeping"
        await asyncio.sleep(0.2)


async def test_config_values_reach_the_running_agent_without_a_restart(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
) -> None:
    runtime = stack_operator.controllers.local_runtime
    assert runtime is not None
    repo = f"fleet-config-{namespace}"
    commit = e2e.create_repo(git, repo)
    await kc.create(resources.CONFIG_MAP.new("tuning", namespace, data={"first": "one", "second": "two"}))
    await kc.create(resources.SECRET.new("tokens", namespace, stringData={"old": "old-token", "new": "new-token"}))
    await kc.create(e2e.git_stack("tuned", namespace, git.http_url(repo), commit=commit,
                                  config={"greeting": "hello"},
                                  configRef={"cmPlain": {"name": "tuning", "key": "first"}},
                                  secretsRef={"literalSecret": _literal("first-s3cret"),
                                              "secretFromSecret": _token("old")}))
    stack = await e2e.wait_for(kc, resources.STACK, "tuned", namespace, e2e.is_ready)
    assert (stack["status"]["outputs"]["greeting"], stack["status"]["outputs"]["cmPlain"]) == ("hello", "one")
    assert await _secret_outputs(kc, stack) == ("first-s3cret", "old-token")
    key = objects.ObjectKey(namespace, "tuned")
    agent = runtime.get(key)
    assert agent is not None
    assert agent.alive
    ws = await kc.get(resources.WORKSPACE, "tuned", namespace)
    placed_at = ws["metadata"]["generation"]
    assert _applied(ws)["podGeneration"] == _applied(ws)["configGeneration"] == placed_at

    # Values only (a config value, another key of the same ConfigMap, a Literal secret, another key of the same
    # Secret): the same agent process runs the Update.
    await kc.patch(resources.STACK, "tuned", {"spec": {
        "config": {"greeting": "bonjour"}, "configRef": {"cmPlain": {"name": "tuning", "key": "second"}},
        "secretsRef": {"literalSecret": _literal("second-s3cret"), "secretFromSecret": _token("new")}}}, namespace)
    stack = await e2e.wait_for(kc, resources.STACK, "tuned", namespace,
                               lambda o: e2e.is_ready(o) and o["status"]["outputs"].get("greeting") == "bonjour")
    assert stack["status"]["outputs"]["cmPlain"] == "two"
    assert await _secret_outputs(kc, stack) == ("second-s3cret", "new-token")
    assert e2e.last_update(stack)["state"] == "succeeded"
    assert runtime.get(key) is agent, "the agent was restarted for a config change"
    assert agent.alive
    ws = await kc.get(resources.WORKSPACE, "tuned", namespace)
    assert ws["metadata"]["generation"] > placed_at
    assert _applied(ws) == {"podGeneration": placed_at, "podDigest": _applied(ws)["podDigest"],
                            "configGeneration": ws["metadata"]["generation"]}
    assert (await _events_until(kc, "tuned", namespace, lambda r: "ConfigApplied" in r)).count("ConfigApplied") == 1

    # Something the pod is made of (an env var): a new agent, as before.
    await kc.patch(resources.STACK, "tuned", {"spec": {"envRefs": {
        "LITERAL_ENV": {"type": "Literal", "literal": {"value": "from-env"}}}}}, namespace)
    stack = await e2e.wait_for(kc, resources.STACK, "tuned", namespace,
                               lambda o: e2e.is_ready(o) and o["status"]["outputs"].get("literalEnv") == "from-env")
    assert stack["status"]["outputs"]["greeting"] == "bonjour"
    restarted = runtime.get(key)
    assert restarted is not None
    assert restarted is not agent
    assert not agent.alive
    ws = await kc.get(resources.WORKSPACE, "tuned", namespace)
    assert _applied(ws)["podGeneration"] == _applied(ws)["configGeneration"] == ws["metadata"]["generation"]


def _literal(value: str) -> dict[str, Any]:
    return {"type": "Literal", "literal": {"value": value}}


def _token(key: str) -> dict[str, Any]:
    return {"type": "Secret", "secret": {"name": "tokens", "key": key}}


async def _secret_outputs(kc: kclient.Client, stack: dict[str, Any]) -> tuple[str, str]:
    """The plaintext of the Stack's two secret outputs, from its last Update's outputs Secret."""
    update = await kc.get(resources.UPDATE, e2e.last_update(stack)["name"], objects.namespace_of(stack))
    real = await e2e.outputs_of(kc, update)
    return real["literalSecret"], real["secretFromSecret"]


async def _ctl_get(cp: controlplane.ControlPlane, namespace: str, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        str(SCRIPT), "get", "-n", namespace, *args, "--kubeconfig", str(cp.kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_an_idle_workspace_sleeps_and_a_resync_wakes_it(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    cluster: controlplane.ControlPlane,
) -> None:
    runtime = stack_operator.controllers.local_runtime
    assert runtime is not None
    repo = f"fleet-idle-{namespace}"
    commit = e2e.create_repo(git, repo)
    await kc.create(e2e.git_stack("sleepy", namespace, git.http_url(repo), commit=commit,
                                  workspaceIdleTimeout="2s"))
    first = await e2e.wait_for(kc, resources.STACK, "sleepy", namespace, e2e.is_ready)
    ws = await kc.get(resources.WORKSPACE, "sleepy", namespace)
    assert ws["spec"]["idleTimeout"] == "2s"

    # Idle for 2s: no agent process, Ready=True/Sleeping without an address; the Stack stays Ready.
    ws = await e2e.wait_for(kc, resources.WORKSPACE, "sleepy", namespace,
                            lambda o: _workspace_reason(o) == "Sleeping", timeout=60)
    assert e2e.condition(ws, "Ready")["status"] == "True"
    assert e2e.condition(ws, "Ready")["message"] == ("Scaled to zero after 2s without an update; the next update "
                                                     "wakes the workspace")
    assert "address" not in ws["status"]
    await _no_agent(runtime, objects.ObjectKey(namespace, "sleepy"))
    stack = await kc.get(resources.STACK, "sleepy", namespace)
    assert e2e.is_ready(stack)
    assert e2e.last_update(stack)["name"] == e2e.last_update(first)["name"]
    rows = {line.split()[0]: [c.strip() for c in line.split("   ") if c.strip()]
            for line in (await _ctl_get(cluster, namespace)).splitlines()[1:]}
    assert rows["sleepy"][1] == "Ready (sleeping)"
    assert "Sleeping" in (await _ctl_get(cluster, namespace, "-o", "wide")).splitlines()[1]

    # A resync wakes it: the Update runs on a fresh agent, then the workspace goes back to sleep.
    await e2e.request_reconcile(kc, "sleepy", namespace, "wake-up")
    woken = await e2e.wait_for(kc, resources.STACK, "sleepy", namespace,
                               lambda o: e2e.is_ready(o) and e2e.last_update(o).get("reconcileRequest") == "wake-up")
    assert e2e.last_update(woken)["state"] == "succeeded"
    assert e2e.last_update(woken)["name"] != e2e.last_update(first)["name"]
    await e2e.wait_for(kc, resources.WORKSPACE, "sleepy", namespace,
                       lambda o: _workspace_reason(o) == "Sleeping" and "address" not in o["status"], timeout=60)
    await _no_agent(runtime, objects.ObjectKey(namespace, "sleepy"))
    # The event follows the agent's stop; at least two: on a slow machine it may also have slept between becoming
    # ready and its first Update. Every wake is between two sleeps.
    reasons = await _events_until(kc, "sleepy", namespace, lambda r: r.count("Sleeping") >= 2)
    assert reasons.count("Waking") >= 1, reasons
    assert reasons.count("Sleeping") == reasons.count("Waking") + 1, reasons


@pytest.mark.parametrize("value", ["ten minutes", "-5m", "15", "1d"])
async def test_a_meaningless_idle_timeout_is_refused(kc: kclient.Client, namespace: str, value: str) -> None:
    stack = e2e.git_stack("bad-idle", namespace, "https://example.com/repo.git", commit="abc",
                          workspaceIdleTimeout=value)
    with pytest.raises(errors.Invalid) as refused:
        await kc.create(stack)
    assert "spec.workspaceIdleTimeout" in refused.value.message
    assert ("workspaceIdleTimeout must be a duration such as 15m, 1h30m or 90s (0s never scales the workspace to "
            "zero)") in refused.value.message
    workspace = resources.WORKSPACE.new("bad-idle", namespace, spec={"idleTimeout": value})
    with pytest.raises(errors.Invalid) as refused:
        await kc.create(workspace)
    assert "spec.idleTimeout: Invalid value" in refused.value.message
    assert "idleTimeout must be a duration such as 15m" in refused.value.message


@pytest.mark.parametrize("size", ["lots", "2 Gi", "-1Gi", "2GiB", ""])
async def test_a_share_volume_size_that_is_no_quantity_is_refused(kc: kclient.Client, namespace: str,
                                                                  size: str) -> None:
    """The Workspace CRD refuses it (a Stack's workspaceTemplate, which the API server does not check, stalls with
    the same words: tests/unit/controllers/stack/test_workspace_template.py)."""
    workspace = resources.WORKSPACE.new("bad-share", namespace, spec={"shareVolume": {"size": size}})
    with pytest.raises(errors.Invalid) as refused:
        await kc.create(workspace)
    assert "spec.shareVolume.size: Invalid value" in refused.value.message
    assert "size must be a storage quantity such as 2Gi or 500Mi" in refused.value.message
    kept = {"size": "1.5Gi", "storageClassName": "fast"}
    good = resources.WORKSPACE.new("good-share", namespace, spec={"shareVolume": kept})
    assert (await kc.create(good))["spec"]["shareVolume"] == kept


async def test_meaningful_idle_timeouts_are_stored(kc: kclient.Client, namespace: str) -> None:
    for index, value in enumerate(("0", "0s", "90s", "1h30m", "1.5h")):
        stack = e2e.git_stack(f"idle-{index}", namespace, "https://example.com/repo.git", commit="abc",
                              workspaceIdleTimeout=value)
        created = await kc.create(stack)
        assert created["spec"]["workspaceIdleTimeout"] == value


async def test_the_operators_default_idle_timeout_and_a_stack_that_opts_out(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, cluster: controlplane.ControlPlane,
    tmp_path: Path, pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--workspace-idle-timeout` puts every workspace to sleep; a Stack's `workspaceIdleTimeout: 0s` keeps its own
    workspace running."""
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    repo = f"fleet-default-{namespace}"
    commit = e2e.create_repo(git, repo)
    async with operator.running(cluster.kubeconfig, tmp_path / "workspaces", namespace=namespace,
                                workspace_idle_timeout=2.0) as op:
        runtime = op.controllers.local_runtime
        assert runtime is not None
        await kc.create(e2e.git_stack("defaulted", namespace, git.http_url(repo), commit=commit))
        await kc.create(e2e.git_stack("always-on", namespace, git.http_url(repo), commit=commit,
                                      workspaceIdleTimeout="0s"))
        for name in ("defaulted", "always-on"):
            await e2e.wait_for(kc, resources.STACK, name, namespace, e2e.is_ready)
        await e2e.wait_for(kc, resources.WORKSPACE, "defaulted", namespace,
                           lambda o: _workspace_reason(o) == "Sleeping", timeout=60)
        await _no_agent(runtime, objects.ObjectKey(namespace, "defaulted"))
        # Once every look the workspace controller scheduled for it has come and gone (the idle timer an opt-out
        # failed to cancel would be one), the opted-out workspace still runs its agent, and nothing will stop it.
        await e2e.quiet(op.manager.registry, names.WORKSPACE_CONTROLLER, op.controllers.workspaces.controller,
                        objects.ObjectKey(namespace, "always-on"))
        always_on = await kc.get(resources.WORKSPACE, "always-on", namespace)
        assert _workspace_reason(always_on) == "Succeeded"
        agent = runtime.get(objects.ObjectKey(namespace, "always-on"))
        assert agent is not None
        assert agent.alive
