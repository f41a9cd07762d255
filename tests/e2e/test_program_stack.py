"""A Program and a Stack that references it, end to end: real API server, the operator in-process with the
`local` workspace runtime, the real Pulumi CLI and YAML language host, a file backend."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pko.api import names
from pko.kube import client as kclient
from pko.kube import resources
from pko.runtime import ports
from pko.testing import operator
from pko.testing.waiting import condition, wait_for

PASSPHRASE = {"type": "Literal", "literal": {"value": "e2e-passphrase"}}


def ready_at(generation: int) -> Callable[[dict[str, Any]], bool]:
    def test(obj: dict[str, Any]) -> bool:
        last = (obj.get("status") or {}).get("lastUpdate") or {}
        return condition(obj, "Ready").get("status") == "True" and last.get("generation") == generation
    return test


def program(greeting: str) -> dict[str, Any]:
    return {"outputs": {"greeting": greeting, "token": {"fn::secret": "s3cr3t"}}}


async def program_stack(kc: kclient.Client, name: str, namespace: str, greeting: str, tmp_path: Path) -> Path:
    """A Program `name` and a Stack `name` running it, its state in a file backend under `tmp_path` (returned)."""
    await kc.create(resources.PROGRAM.new(name, namespace, program=program(greeting)))
    backend = tmp_path / "state"
    backend.mkdir()
    await kc.create(resources.STACK.new(name, namespace, spec={
        "stack": "dev", "programRef": {"name": name}, "backend": f"file://{backend}",
        "envRefs": {"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE},
    }))
    return backend


async def test_program_stack_becomes_ready_with_masked_outputs(
    kc: kclient.Client, namespace: str, running_operator: operator.Operator, tmp_path: Path,
) -> None:
    backend = await program_stack(kc, "hello", namespace, "hello from a Program", tmp_path)

    stack = await wait_for(kc, resources.STACK, "hello", namespace, ready_at(1))
    status = stack["status"]
    assert status["outputs"] == {"greeting": "hello from a Program", "token": "[secret]"}
    last = status["lastUpdate"]
    assert last["state"] == "succeeded"
    assert last["type"] == "up"
    assert last["lastSuccessfulCommit"] == last["lastAttemptedCommit"] == "1"
    assert last["name"].startswith("hello-")
    assert last["lastResyncTime"]
    assert status["projectInfo"] == {"name": "hello", "runtime": "yaml"}
    assert status["observedGeneration"] == 1
    assert condition(stack, "Ready")["reason"] == "ProcessingCompleted"
    assert "currentUpdate" not in status
    assert stack["metadata"]["finalizers"] == ["finalizer.stack.pulumi.com"]
    assert any(backend.rglob("*.json")), "the stack's state went to the Stack's own backend"
    # its agent listens on a port of the process's picker: below the range outgoing connections take their local
    # ports from, and not one handed to anything else of this process (the test bed's servers) a moment before
    runtime = running_operator.controllers.local_runtime
    assert runtime is not None
    agents = [agent for agent in runtime.agents.values() if agent.alive]
    assert agents
    assert all(ports.LOW <= agent.port <= ports.HIGH and agent.port in ports._handed for agent in agents), \
        [agent.port for agent in agents]

    # The Update that ran carries the reference's shape, and was released by the Stack.
    # The release is a separate write after the status save (as in the reference), so it is waited for.
    update = await wait_for(kc, resources.UPDATE, last["name"], namespace,
                            lambda o: not o["metadata"].get("finalizers"))
    assert update["spec"]["type"] == "up"
    assert update["spec"]["message"] == "Initial stack update"
    assert update["spec"]["ttlAfterCompleted"] == "24h0m0s"

    # Editing the Program publishes a new artifact revision, and the Stack runs again.
    current = await kc.get(resources.PROGRAM, "hello", namespace)
    current["program"] = program("hello again")
    await kc.replace(current)
    stack = await wait_for(kc, resources.STACK, "hello", namespace,
                           lambda o: (o.get("status") or {}).get("outputs", {}).get("greeting") == "hello again"
                           and condition(o, "Ready").get("status") == "True")
    assert stack["status"]["lastUpdate"]["lastSuccessfulCommit"] == "2"
    assert stack["status"]["lastUpdate"]["name"] != last["name"]


async def test_a_workspace_label_taken_off_comes_back_at_the_next_reconcile(
    kc: kclient.Client, namespace: str, running_operator: operator.Operator, tmp_path: Path,
) -> None:
    """The Stack skips applying an unchanged Workspace (pko.runtime.applied), but not once the Workspace's metadata
    lost what the apply sets: a label edit bumps no generation, and the next reconcile puts it back, minutes before
    the time-based re-apply would; labels of others stay."""
    await program_stack(kc, "labelled", namespace, "hello", tmp_path)
    await wait_for(kc, resources.STACK, "labelled", namespace, ready_at(1))
    ours = names.stack_component_labels("labelled")
    workspace = await kc.get(resources.WORKSPACE, "labelled", namespace)
    assert ours.items() <= workspace["metadata"]["labels"].items()
    generation = workspace["metadata"]["generation"]

    label = names.LABEL_STACK_NAME
    await kc.patch(resources.WORKSPACE, "labelled", {"metadata": {"labels": {label: None, "team": "platform"}}},
                   namespace)
    await kc.patch(resources.STACK, "labelled",
                   {"metadata": {"annotations": {names.ANNOTATION_RECONCILE_REQUEST: "relabel"}}}, namespace)
    workspace = await wait_for(kc, resources.WORKSPACE, "labelled", namespace,
                               lambda o: (o["metadata"].get("labels") or {}).get(label) == "labelled", timeout=60)
    assert workspace["metadata"]["labels"]["team"] == "platform"
    assert workspace["metadata"]["generation"] == generation
