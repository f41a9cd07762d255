"""StackRollouts (pko, docs/rollouts.md), end to end on the real control plane with the operator's `local` runtime,
real YAML Programs and the real Pulumi CLI.

- **Rollback:** six Stacks in three waves move from Program shop-v1 to shop-v2. The health gate (an HTTP check of a
  loopback server the test controls, plus a condition on the Stacks' outputs) passes in wave 1 and fails in wave 2:
  waves 1-2 go back to shop-v1 (their outputs say v1 again), wave 3 never starts, and status, conditions and events
  say why. Meanwhile a second rollout over the same Stacks is refused (`StackInAnotherRollout`).
- **To the end:** a rollout steered with `kubectl pko rollout` (paused at creation, resumed, a one-hour bake ended
  by promote) goes through every wave to completion; a Stack that needs approvals holds its wave, the rollout says
  so, and goes on once its plan is approved.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stack_e2e as e2e
from test_kubectl_pko import ctl

from pko.api import names
from pko.api import rollout as api
from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import controlplane, operator

PASSPHRASE = {"type": "Literal", "literal": {"value": "e2e-passphrase"}}
ENVS = ("dev", "staging", "prod")


class Health:
    """A loopback HTTP endpoint whose answer the test sets (the application health the gate checks); with `token`
    set, a request without `Authorization: Bearer <token>` gets 401."""

    def __init__(self) -> None:
        self.status = 200
        self.hits = 0
        self.token: str | None = None
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.hits += 1
                status = outer.status
                if outer.token is not None and self.headers.get("Authorization") != f"Bearer {outer.token}":
                    status = 401
                body = b"ok" if status == 200 else b"unhealthy"
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/healthz"


@pytest.fixture
def health() -> Iterator[Health]:
    found = Health()
    thread = threading.Thread(target=found.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        found.server.shutdown()
        found.server.server_close()


async def _fleet(kc: kclient.Client, namespace: str, backend: Path) -> None:
    """Programs shop-v1 and shop-v2, and two Stacks per environment on shop-v1, all Ready."""
    for version in ("v1", "v2"):
        await kc.create(resources.PROGRAM.new(f"shop-{version}", namespace,
                                              program={"outputs": {"version": version}}))
    backend.mkdir()
    for env in ENVS:
        for i in (1, 2):
            stack = resources.STACK.new(
                f"{env}-{i}", namespace,
                spec={"stack": f"{env}-{i}", "programRef": {"name": "shop-v1"}, "backend": f"file://{backend}",
                      "envRefs": {"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE}})
            stack["metadata"]["labels"] = {"app": "shop", "env": env}
            await kc.create(stack)
    for env in ENVS:
        for i in (1, 2):
            await e2e.wait_for(kc, resources.STACK, f"{env}-{i}", namespace, e2e.is_ready)


def _rollout(name: str, namespace: str, *, gates: list[dict[str, Any]], bake: str = "2s",
             **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "shop"}},
        "revision": {"programRef": {"name": "shop-v2"}},
        "waves": [{"name": "dev", "selector": {"matchLabels": {"env": "dev"}}, "bake": bake},
                  {"name": "staging", "selector": {"matchLabels": {"env": "staging"}}, "bake": "2s"},
                  {"name": "prod", "percent": 100, "maxConcurrent": 1}],
        "gates": gates,
        **spec,
    }
    return resources.STACK_ROLLOUT.new(name, namespace, spec=body)


def _phase(*phases: str) -> Any:
    return lambda obj: (obj.get("status") or {}).get("phase") in phases


def _stacks(obj: dict[str, Any]) -> dict[str, str]:
    return {s["name"]: s["state"] for s in obj["status"].get("stacks") or []}


async def _reasons(kc: kclient.Client, name: str, namespace: str) -> list[str]:
    return [e["reason"] for e in await e2e.events_of(kc, name, namespace, kind="StackRollout")]


async def test_a_failing_gate_in_wave_two_rolls_waves_one_and_two_back_and_wave_three_never_starts(
    kc: kclient.Client, namespace: str, stack_operator: operator.Operator, tmp_path: Path, health: Health,
) -> None:
    await _fleet(kc, namespace, tmp_path / "state")
    health.token = "gate-s3cret-token"  # the endpoint needs a bearer token, which a Secret holds
    await kc.create(resources.SECRET.new("health-auth", namespace, stringData={
        "Authorization": f"Bearer {health.token}"}))
    gates = [{"name": "site", "http": {"url": health.url}, "interval": "1s", "failureLimit": 2,
              "headersSecretRef": {"name": "health-auth"}},
             {"name": "version", "outputs": {"output": "version", "equals": "v2"}, "interval": "1s"}]
    await kc.create(_rollout("to-v2", namespace, gates=gates))

    # wave 1 passes its gates and wave 2 starts; a second rollout over the same Stacks is refused meanwhile
    await e2e.wait_for(kc, resources.STACK_ROLLOUT, "to-v2", namespace,
                       lambda o: (o.get("status") or {}).get("currentWave") == 1, timeout=240)
    assert health.hits > 0
    dev = await kc.get(resources.STACK, "dev-1", namespace)
    assert dev["status"]["outputs"]["version"] == "v2"
    assert dev["metadata"]["annotations"][names.ANNOTATION_ROLLOUT] == "to-v2"
    await kc.create(resources.STACK_ROLLOUT.new("rival", namespace, spec={
        "selector": {"matchLabels": {"env": "dev"}}, "revision": {"programRef": {"name": "shop-v1"}},
        "waves": [{"percent": 100}]}))
    rival = await e2e.wait_for(kc, resources.STACK_ROLLOUT, "rival", namespace, _phase(api.BLOCKED))
    assert e2e.condition(rival, "Reconciling")["reason"] == api.REASON_CONFLICT
    assert "dev-1 (to-v2)" in rival["status"]["message"]
    await kc.delete(resources.STACK_ROLLOUT, "rival", namespace)

    # the applications of wave 2 turn unhealthy: the gate fails twice in a row and the rollout rolls back
    health.status = 503
    done = await e2e.wait_for(kc, resources.STACK_ROLLOUT, "to-v2", namespace, _phase(api.ROLLED_BACK),
                              timeout=300)
    status = done["status"]
    assert [w["phase"] for w in status["waves"]] == [api.WAVE_ROLLED_BACK, api.WAVE_ROLLED_BACK, api.WAVE_SKIPPED]
    assert _stacks(done) == {"dev-1": api.STACK_ROLLED_BACK, "dev-2": api.STACK_ROLLED_BACK,
                             "staging-1": api.STACK_ROLLED_BACK, "staging-2": api.STACK_ROLLED_BACK,
                             "prod-1": api.STACK_SKIPPED, "prod-2": api.STACK_SKIPPED}
    assert status["message"].startswith("rolled back (gate site failed 2 checks in a row in wave staging: GET ")
    assert "answered 503" in status["message"]
    assert e2e.condition(done, "Stalled")["reason"] == api.REASON_GATE_FAILED
    assert e2e.condition(done, "Ready")["reason"] == api.REASON_ROLLED_BACK
    site = next(g for g in status["gates"] if g["name"] == "site")
    assert (site["result"], site["failures"]) == (api.GATE_FAILED, 2)
    assert health.token not in json.dumps(done)
    # the rollout writes its status, then posts the pass's events: wait for the last one
    await e2e.events_with(kc, "to-v2", namespace, "RolloutRolledBack", kind="StackRollout")
    assert health.token not in json.dumps(await e2e.events_of(kc, "to-v2", namespace, kind="StackRollout"))
    reasons = await _reasons(kc, "to-v2", namespace)
    for expected in ("RolloutStarted", "RolloutWaveStarted", "RolloutWaveCompleted", "RolloutGateFailed",
                     "RolloutRollingBack", "RolloutRolledBack"):
        assert expected in reasons, reasons
    assert reasons.count("RolloutWaveCompleted") == 1

    metrics = await e2e.scrape(stack_operator, "pko_stackrollout_")
    labels = (("name", "to-v2"), ("namespace", namespace))
    assert metrics[("pko_stackrollout_phase", tuple(sorted((*labels, ("phase", "RolledBack")))))] == 1
    assert metrics[("pko_stackrollout_phase", tuple(sorted((*labels, ("phase", "Completed")))))] == 0
    assert metrics[("pko_stackrollout_stacks", tuple(sorted((*labels, ("state", "RolledBack")))))] == 4
    assert metrics[("pko_stackrollout_stacks", tuple(sorted((*labels, ("state", "Skipped")))))] == 2
    assert metrics[("pko_stackrollout_wave", labels)] == 2
    failed = ("pko_stackrollout_gate_checks_total", tuple(sorted((*labels, ("gate", "site"), ("result", "failed")))))
    passed = ("pko_stackrollout_gate_checks_total", tuple(sorted((*labels, ("gate", "site"), ("result", "passed")))))
    assert metrics[failed] == 2
    assert metrics[passed] >= 1

    for env in ("dev", "staging"):
        for i in (1, 2):
            stack = await kc.get(resources.STACK, f"{env}-{i}", namespace)
            assert stack["spec"]["programRef"] == {"name": "shop-v1"}
            assert e2e.is_ready(stack)
            assert stack["status"]["outputs"]["version"] == "v1"
            assert names.ANNOTATION_ROLLOUT not in (stack["metadata"].get("annotations") or {})
            assert len(await e2e.updates_of(kc, f"{env}-{i}", namespace)) == 3  # first up, v2, back to v1
    for i in (1, 2):
        prod = await kc.get(resources.STACK, f"prod-{i}", namespace)
        assert prod["metadata"]["generation"] == 1
        assert prod["status"]["outputs"]["version"] == "v1"
        assert len(await e2e.updates_of(kc, f"prod-{i}", namespace)) == 1


async def test_a_rollout_steered_with_kubectl_pko_goes_through_every_wave_to_completion(
    kc: kclient.Client, namespace: str, stack_operator: operator.Operator, tmp_path: Path, health: Health,
    cluster: controlplane.ControlPlane,
) -> None:
    await _fleet(kc, namespace, tmp_path / "state")
    await kc.patch(resources.STACK, "prod-2", {"spec": {"approval": {"required": True}}}, namespace)
    gates = [{"name": "site", "http": {"url": health.url, "bodyContains": "ok"}, "interval": "1s"}]
    await kc.create(_rollout("to-v2", namespace, gates=gates, bake="1h", paused=True))
    paused = await e2e.wait_for(kc, resources.STACK_ROLLOUT, "to-v2", namespace, _phase(api.PAUSED))
    assert e2e.condition(paused, "Reconciling")["reason"] == api.REASON_PAUSED
    assert (await kc.get(resources.STACK, "dev-1", namespace))["spec"]["programRef"]["name"] == "shop-v1"

    code, out, err = await ctl(cluster, "rollout", "resume", "to-v2", "-n", namespace)
    assert (code, err) == (0, ""), err
    assert "resume requested" in out
    # wave 1 bakes for an hour: promote ends the bake once its gate passed
    baking = await e2e.wait_for(kc, resources.STACK_ROLLOUT, "to-v2", namespace,
                                lambda o: _phase(api.BAKING)(o) and any(
                                    g.get("result") == api.GATE_PASSED for g in o["status"].get("gates") or []),
                                timeout=240)
    assert baking["status"]["currentWave"] == 0
    code, out, _ = await ctl(cluster, "rollout", "status", "to-v2", "-n", namespace)
    assert code == 0
    assert f"StackRollout {namespace}/to-v2: Baking" in out
    assert "*dev" in out
    assert "site" in out
    assert "Passed" in out
    code, _, err = await ctl(cluster, "rollout", "promote", "to-v2", "-n", namespace)
    assert code == 0, err

    # prod-2 needs an approval of each plan: its wave waits for it, and the rollout says so
    waiting = await e2e.wait_for(kc, resources.STACK_ROLLOUT, "to-v2", namespace, lambda o: e2e.condition(
        o, "Reconciling").get("reason") == api.REASON_WAITING_FOR_APPROVAL, timeout=240)
    assert waiting["status"]["message"] == "wave prod waits for StackApprovals of prod-2"
    # what the rollout waits for is the plan of prod-2's v2 spec (not the one of v1 it awaited when the wave began)
    prod2 = await kc.get(resources.STACK, "prod-2", namespace)
    assert prod2["spec"]["programRef"] == {"name": "shop-v2"}
    assert prod2["status"]["approval"]["state"] == "AwaitingApproval"
    assert prod2["status"]["approval"]["generation"] == prod2["metadata"]["generation"]
    await kc.create(resources.STACK_APPROVAL.new("prod-2-v2", namespace, spec={
        "stackName": "prod-2", "digest": prod2["status"]["approval"]["digest"],
        "approvedBy": controlplane.ADMIN_USER}))

    code, out, err = await ctl(cluster, "rollout", "status", "to-v2", "-n", namespace, "--wait", "--timeout", "300")
    assert code == 0, out + err
    assert f"StackRollout {namespace}/to-v2: Completed" in out
    done = await kc.get(resources.STACK_ROLLOUT, "to-v2", namespace)
    assert e2e.condition(done, "Ready")["status"] == "True"
    assert [w["phase"] for w in done["status"]["waves"]] == [api.WAVE_SUCCEEDED] * 3
    assert done["status"]["waves"][0]["bakePromoted"] is True
    assert set(_stacks(done).values()) == {api.STACK_SUCCEEDED}
    assert done["status"]["message"] == "6 of 6 Stacks at program shop-v2"
    await e2e.events_with(kc, "to-v2", namespace, "RolloutCompleted", kind="StackRollout")  # posted after the status
    reasons = await _reasons(kc, "to-v2", namespace)
    assert reasons.count("RolloutWaveCompleted") == 3
    assert "RolloutPromoted" in reasons
    assert "RolloutResumed" in reasons
    assert "RolloutWaitingForApproval" in reasons
    assert reasons.count("RolloutCompleted") == 1
    for env in ENVS:
        for i in (1, 2):
            stack = await kc.get(resources.STACK, f"{env}-{i}", namespace)
            assert stack["status"]["outputs"]["version"] == "v2"
            assert names.ANNOTATION_ROLLOUT not in (stack["metadata"].get("annotations") or {})
            if (env, i) != ("prod", 2):  # the approved Stack also ran its previews
                assert len(await e2e.updates_of(kc, f"{env}-{i}", namespace)) == 2

    # a finished rollout does nothing more; a bad verb target is a clear error
    code, _, err = await ctl(cluster, "rollout", "pause", "missing", "-n", namespace)
    assert code == 1
    assert f"stackrollout {namespace}/missing not found" in err
