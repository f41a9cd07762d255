"""After a (re)start the operator verifies the settled Stacks it finds spread over a window, not all at once, and runs
nothing again (docs/scale.md, "After a restart").

End to end on the real control plane with agents as local processes: a fleet of branch-tracking Stacks reaches Ready;
a second operator takes over. Each settled Stack's source is resolved again (its branch listed) once, at a delay of
its own, spread over the window; a Stack changed right after the restart is not settled and is updated at once; no
settled Stack gets a new Update."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import stack_e2e as e2e

from pko.controllers.stack import restart, source
from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import controlplane, gitserver, operator
from pko.testing.waiting import wait_for

FLEET = 8
SPREAD = 2.5  # seconds a settled Stack adds to the window: 20 s for the fleet
YAML = "name: restart\nruntime: yaml\noutputs:\n  answer: 42\n"


async def test_a_restart_spreads_its_first_looks_and_runs_nothing_again(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, cluster: controlplane.ControlPlane,
    tmp_path: Path, pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    repo = f"restart-{namespace}"
    git.create_repo(repo, {"Pulumi.yaml": YAML})
    backend = tmp_path / "state"
    backend.mkdir()
    names = [f"r{i}" for i in range(FLEET)]
    passphrase = {"PULUMI_CONFIG_PASSPHRASE": {"type": "Literal", "literal": {"value": "restart"}}}
    async with operator.running(cluster.kubeconfig, tmp_path / "first", namespace=namespace):
        for name in names:
            await kc.create(e2e.git_stack(name, namespace, git.http_url(repo), branch="main",
                                          backend=f"file://{backend}", envRefs=passphrase))
        for name in names:
            await wait_for(kc, resources.STACK, name, namespace, e2e.is_ready, timeout=240)
    before = {name: len(await e2e.updates_of(kc, name, namespace)) for name in names}

    resolved: dict[str, list[float]] = {name: [] for name in names}
    real = source.Resolver.resolve

    async def recording(self: source.Resolver, stack: Any) -> Any:
        resolved.setdefault(stack.metadata.name, []).append(time.monotonic())
        return await real(self, stack)

    monkeypatch.setattr(source.Resolver, "resolve", recording)
    e2e.with_settings(monkeypatch, restart_spread=SPREAD)
    async with operator.running(cluster.kubeconfig, tmp_path / "second", namespace=namespace):
        started = time.monotonic()
        # Changed right away: not settled, so looked at (and updated) at once.
        await kc.patch(resources.STACK, "r0", {"spec": {"config": {"changed": "yes"}}}, namespace)
        changed = await wait_for(kc, resources.STACK, "r0", namespace, lambda o: e2e.is_ready(o) and (
            o["status"].get("observedGeneration") == 2), timeout=120)
        assert e2e.last_update(changed)["generation"] == 2
        window = restart.window(FLEET, SPREAD)

        async def all_looked_at() -> bool:
            return all(resolved[name] for name in names)

        while not await all_looked_at():
            assert time.monotonic() - started < window + 60, {n: len(t) for n, t in resolved.items()}
            await asyncio.sleep(0.5)
        for name in names[1:]:
            stack = await kc.get(resources.STACK, name, namespace)
            assert e2e.is_ready(stack), name
    firsts = sorted(times[0] - started for name, times in resolved.items() if name != "r0")
    assert firsts[-1] - firsts[0] > 4, f"the first looks were not spread over the {window:.0f}s window: {firsts}"
    assert firsts[-1] < window + 5, firsts
    after = {name: len(await e2e.updates_of(kc, name, namespace)) for name in names}
    assert after == before | {"r0": before["r0"] + 1}, (before, after)
