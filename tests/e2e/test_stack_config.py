"""A Stack's configuration reaches its program, end to end: `config` (string and structured), `configRef`
(ConfigMap keys, plain and JSON), `secretsRef` (literal and Secret) and `envRefs` (literal and Secret). The program
exports what it got; secret values show as "[secret]" on the Stack and only the outputs Secret holds them.
References the reference refuses (other namespaces, `Env` and `FS` refs) stall the Stack with its message.
The reconciliation-request annotation re-runs the Stack, and `refresh: true` reaches every Update."""

from __future__ import annotations

import stack_e2e as e2e

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import gitserver, operator

SETTINGS = {"replicas": 3, "tags": ["a", "b"], "nested": {"enabled": True}}


def _literal(value: str) -> dict[str, object]:
    return {"type": "Literal", "literal": {"value": value}}


def _secret(name: str, key: str, namespace: str | None = None) -> dict[str, object]:
    ref: dict[str, object] = {"name": name, "key": key}
    if namespace is not None:
        ref["namespace"] = namespace
    return {"type": "Secret", "secret": ref}


INVALID = {
    # Stack name → (spec fields, the reference's message)
    "cross-ns-secret": ({"secretsRef": {"token": _secret("app-secrets", "token", namespace="elsewhere")}},
                        "cross-namespace refs are not allowed"),
    "cross-ns-env": ({"envRefs": {"TOKEN": _secret("app-secrets", "envtoken", namespace="elsewhere")}},
                     "cross-namespace refs are not allowed"),
    "env-ref": ({"envRefs": {"TOKEN": {"type": "Env", "env": {"name": "HOME"}}}}, 'ref type "Env" is deprecated'),
    "fs-ref": ({"secretsRef": {"token": {"type": "FS", "filesystem": {"path": "/etc/hostname"}}}},
               'ref type "FS" is deprecated'),
}


async def test_config_secrets_and_env_reach_the_program(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
) -> None:
    repo = f"config-{namespace}"
    commit = e2e.create_repo(git, repo)
    await kc.create(resources.CONFIG_MAP.new("app-config", namespace, data={
        "plain": "from a ConfigMap", "json": '{"limits": [1, 2], "name": "cm"}'}))
    await kc.create(resources.SECRET.new("app-secrets", namespace, stringData={
        "token": "secret-from-a-secret", "envtoken": "env-from-a-secret"}))
    await kc.create(e2e.git_stack(
        "configured", namespace, git.http_url(repo), commit=commit, refresh=True,
        config={"greeting": "hello", "settings": SETTINGS},
        configRef={"cmPlain": {"name": "app-config", "key": "plain"},
                   "cmJson": {"name": "app-config", "key": "json", "json": True}},
        secretsRef={"literalSecret": _literal("literal-s3cret"),
                    "secretFromSecret": _secret("app-secrets", "token")},
        envRefs={"LITERAL_ENV": _literal("env-from-a-literal"), "SECRET_ENV": _secret("app-secrets", "envtoken")},
    ))
    for name, (spec, _) in INVALID.items():
        await kc.create(e2e.git_stack(name, namespace, git.http_url(repo), commit=commit, **spec))

    # The invalid Stacks stall with the reference's message and an event, and never get a Workspace.
    for name, (_, message) in INVALID.items():
        stalled = await e2e.wait_for(kc, resources.STACK, name, namespace,
                                     lambda o: e2e.reason(o, "Stalled") is not None, timeout=60)
        assert e2e.condition(stalled, "Stalled")["reason"] == "SpecInvalid", name
        assert e2e.condition(stalled, "Stalled")["message"] == message, name
        assert e2e.condition(stalled, "Ready")["status"] == "False"
        assert e2e.condition(stalled, "Ready")["reason"] == "NotReadyStalled"
        assert not e2e.condition(stalled, "Reconciling")
        events = await e2e.events_of(kc, name, namespace)
        assert any(e["reason"] == "StackConfigInvalid" and e["type"] == "Warning" and e["message"] == message
                   for e in events), (name, [(e["reason"], e["message"]) for e in events])
        assert await kc.get_or_none(resources.WORKSPACE, name, namespace) is None

    stack = await e2e.wait_for(kc, resources.STACK, "configured", namespace, e2e.is_ready)
    assert stack["status"]["outputs"] == {
        "greeting": "hello", "settings": SETTINGS,
        "cmPlain": "from a ConfigMap", "cmJson": {"limits": [1, 2], "name": "cm"},
        "literalSecret": "[secret]", "secretFromSecret": "[secret]",
        "literalEnv": "env-from-a-literal", "secretEnv": "[secret]",
        "marker": "v1",
    }
    (update,) = await e2e.updates_of(kc, "configured", namespace)
    assert update["spec"]["refresh"] is True
    real = await e2e.outputs_of(kc, update)
    assert real["literalSecret"] == "literal-s3cret"
    assert real["secretFromSecret"] == "secret-from-a-secret"
    assert real["secretEnv"] == "env-from-a-secret"
    # Secret values went to the workspace as references, never as values.
    ws = await kc.get(resources.WORKSPACE, "configured", namespace)
    assert "secret-from-a-secret" not in str(ws)
    assert "env-from-a-secret" not in str(ws)

    # The reconciliation-request annotation runs the Stack again, and status records the request.
    first = e2e.last_update(stack)
    await e2e.request_reconcile(kc, "configured", namespace, "please-1")
    stack = await e2e.wait_for(kc, resources.STACK, "configured", namespace,
                               lambda o: e2e.last_update(o).get("reconcileRequest") == "please-1" and e2e.is_ready(o))
    assert stack["status"]["observedReconcileRequest"] == "please-1"
    assert e2e.last_update(stack)["name"] != first["name"]
    assert e2e.last_update(stack)["generation"] == first["generation"] == stack["metadata"]["generation"]
    updates = await e2e.updates_of(kc, "configured", namespace)
    assert [u["spec"]["message"] for u in updates] == ["Initial stack update", 'Sync request: "please-1"']
    assert updates[-1]["spec"]["refresh"] is True
    events = await e2e.events_of(kc, "configured", namespace)
    assert any(e["reason"] == "StackUpdateDetected" and e["message"] == 'Sync request: "please-1"' for e in events)
