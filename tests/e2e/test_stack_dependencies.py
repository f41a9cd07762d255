"""Stack outputs as another Stack's config (pko's `spec.outputRefs`), end to end: a downstream Stack waits, saying
so, while its upstream or one of its outputs is missing; it runs once the values are there, with a secret output
kept secret; an upstream update that changes a referenced output cascades into exactly one downstream update, and
one that leaves the outputs alone starts none; references that form a cycle are refused with a condition naming it.
"""

from __future__ import annotations

import json
from typing import Any

import stack_e2e as e2e

from pko.api import names
from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import gitserver, operator, waiting


def _waiting(message: str) -> Any:
    def test(obj: dict[str, Any]) -> bool:
        reconciling = e2e.condition(obj, "Reconciling")
        return reconciling.get("reason") == "WaitingForOutput" and message in reconciling.get("message", "")
    return test


def _ref(stack: str, output: str) -> dict[str, str]:
    return {"stackName": stack, "output": output}


async def _settle(kc: kclient.Client, op: operator.Operator) -> None:
    before = waiting.reconciles(op.manager.registry, names.STACK_CONTROLLER)
    await waiting.settled(op.manager.registry, names.STACK_CONTROLLER, after=before - 1)


async def test_outputs_flow_downstream_only_when_they_change(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
) -> None:
    repo = f"deps-{namespace}"
    commit = e2e.create_repo(git, repo)
    url = git.http_url(repo)

    # The downstream first: its upstream does not exist yet, and it says so.
    await kc.create(e2e.git_stack("app", namespace, url, commit=commit, outputRefs={
        "greeting": _ref("network", "greeting"), "secretFromSecret": _ref("network", "literalSecret")}))
    await e2e.wait_for(kc, resources.STACK, "app", namespace, _waiting('Stack "network" not found'))
    said = await e2e.events_with(kc, "app", namespace, "StackWaitingForOutput")
    assert 'config "greeting": Stack "network" not found' in said[0]["message"]
    assert not await e2e.updates_of(kc, "app", namespace)

    # The upstream runs; the downstream follows with its values, the secret one still a secret.
    await kc.create(e2e.git_stack("network", namespace, url, commit=commit, config={"greeting": "hello"},
                                  secretsRef={"literalSecret": {"type": "Literal", "literal": {"value": "s3cret"}}}))
    await e2e.wait_for(kc, resources.STACK, "network", namespace, e2e.is_ready)
    app = await e2e.wait_for(kc, resources.STACK, "app", namespace, e2e.is_ready, timeout=120)
    assert app["status"]["outputs"]["greeting"] == "hello"
    assert app["status"]["outputs"]["secretFromSecret"] == "[secret]"
    [first] = await e2e.updates_of(kc, "app", namespace)
    assert (await e2e.outputs_of(kc, first))["secretFromSecret"] == "s3cret"
    workspace = await kc.get(resources.WORKSPACE, "app", namespace)
    config = {c["key"]: c for c in workspace["spec"]["stacks"][0]["config"]}
    assert config["secretFromSecret"]["secret"] is True
    assert config["greeting"]["secret"] is False
    assert "s3cret" not in json.dumps(workspace)
    digests = e2e.last_update(app)["outputRefs"]
    assert sorted(digests) == ["greeting", "secretFromSecret"]
    assert "hello" not in json.dumps(app["status"]["lastUpdate"])

    # An upstream update that leaves its outputs alone starts nothing downstream.
    await e2e.request_reconcile(kc, "network", namespace, "again")
    await e2e.wait_for(kc, resources.STACK, "network", namespace,
                       lambda o: e2e.is_ready(o) and e2e.last_update(o).get("reconcileRequest") == "again")
    await _settle(kc, stack_operator)
    assert [u["metadata"]["name"] for u in await e2e.updates_of(kc, "app", namespace)] == [
        first["metadata"]["name"]]

    # A changed output cascades into exactly one downstream update.
    await kc.patch(resources.STACK, "network", {"spec": {"config": {"greeting": "hi"}}}, namespace)
    app = await e2e.wait_for(kc, resources.STACK, "app", namespace,
                             lambda o: e2e.is_ready(o) and (o["status"].get("outputs") or {}).get("greeting") == "hi",
                             timeout=120)
    await _settle(kc, stack_operator)
    updates = await e2e.updates_of(kc, "app", namespace)
    assert len(updates) == 2, [u["spec"]["message"] for u in updates]
    assert updates[1]["spec"]["message"] == "Referenced outputs changed: greeting"
    assert e2e.last_update(app)["outputRefs"]["greeting"] != digests["greeting"]
    assert e2e.last_update(app)["outputRefs"]["secretFromSecret"] == digests["secretFromSecret"]
    copies = await kc.list(resources.SECRET, namespace, labels={names.LABEL_COMPONENT: "output-refs"})
    assert [c["metadata"]["name"] for c in copies.items] == ["app-output-refs"]  # one copy, updated in place
    assert copies.items[0]["metadata"]["ownerReferences"][0]["name"] == "app"

    # The upstream's Update is cleaned up (as its ttlAfterCompleted does): a Stack that reads it later asks it for a
    # new up, and runs with its outputs.
    network = await kc.get(resources.STACK, "network", namespace)
    gone = e2e.last_update(network)["name"]
    await kc.delete(resources.UPDATE, gone, namespace)
    await e2e.wait_gone(kc, resources.UPDATE, gone, namespace, timeout=60)
    await kc.create(e2e.git_stack("late", namespace, url, commit=commit,
                                  outputRefs={"greeting": _ref("network", "greeting")}))
    late = await e2e.wait_for(kc, resources.STACK, "late", namespace, e2e.is_ready, timeout=180)
    assert late["status"]["outputs"]["greeting"] == "hi"
    network = await kc.get(resources.STACK, "network", namespace)
    assert e2e.last_update(network)["reconcileRequest"] == f"outputs-of-{gone}"


async def test_a_missing_output_waits_and_a_cycle_is_refused(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
) -> None:
    repo = f"deps-bad-{namespace}"
    commit = e2e.create_repo(git, repo)
    url = git.http_url(repo)
    await kc.create(e2e.git_stack("base", namespace, url, commit=commit, config={"greeting": "hello"}))
    await kc.create(e2e.git_stack("lost", namespace, url, commit=commit,
                                  outputRefs={"greeting": _ref("base", "nope")}))
    await kc.create(e2e.git_stack("ping", namespace, url, commit=commit, outputRefs={"greeting": _ref("pong", "x")}))
    await kc.create(e2e.git_stack("pong", namespace, url, commit=commit, outputRefs={"greeting": _ref("ping", "x")}))

    await e2e.wait_for(kc, resources.STACK, "base", namespace, e2e.is_ready)
    lost = await e2e.wait_for(kc, resources.STACK, "lost", namespace,
                              _waiting('config "greeting": Stack "base" has no output "nope"'))
    assert e2e.condition(lost, "Ready")["status"] == "False"
    assert not e2e.condition(lost, "Stalled")
    for name, cycle in (("ping", "ping → pong → ping"), ("pong", "pong → ping → pong")):
        stack = await e2e.wait_for(kc, resources.STACK, name, namespace,
                                   lambda o: e2e.reason(o, "Stalled") == "OutputRefCycle")
        assert cycle in e2e.condition(stack, "Stalled")["message"]
        invalid = await e2e.events_with(kc, name, namespace, "StackConfigInvalid")
        assert cycle in invalid[0]["message"]
    for name in ("lost", "ping", "pong"):
        assert not await e2e.updates_of(kc, name, namespace)
    # The cycle broken, the Stack runs (the output it waits for is missing until the other one has run).
    await kc.patch(resources.STACK, "pong", {"spec": {"outputRefs": None}}, namespace)
    await e2e.wait_for(kc, resources.STACK, "pong", namespace, e2e.is_ready, timeout=120)
    await e2e.wait_for(kc, resources.STACK, "ping", namespace, _waiting('Stack "pong" has no output "x"'))
