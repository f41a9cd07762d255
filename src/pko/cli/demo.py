"""The example `pko dev` runs, and how it shows it: a Program and a Stack, progress lines, the Ready Stack as
`kubectl get -o yaml` prints it, its outputs (secret ones masked). Shared by both runtimes of `pko dev`
(`pko.cli.dev` for `local`, `pko.cli.devcluster` for `pod`)."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import yaml

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import waiting

DEMO_NAMESPACE = "pko-demo"
DEMO_PASSPHRASE = "pko-demo-passphrase"


def demo_objects(backend: str, workspace_template: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The example: a Pulumi YAML Program (no cloud, no plugins) and a Stack that deploys it."""
    program = resources.PROGRAM.new("hello-pko", DEMO_NAMESPACE, program={
        "configuration": {"greeting": {"type": "String", "default": "Hello"}},
        "variables": {
            "message": {"fn::join": [", ", ["${greeting}", "pko"]]},
            "encoded": {"fn::toBase64": "${message}"},
        },
        "outputs": {
            "message": "${message}",
            "encoded": "${encoded}",
            "token": {"fn::secret": "not-for-your-eyes"},
        },
    })
    stack = resources.STACK.new("hello-pko", DEMO_NAMESPACE, spec={
        "stack": "dev",
        "programRef": {"name": "hello-pko"},
        "backend": backend,
        "envRefs": {"PULUMI_CONFIG_PASSPHRASE": {"type": "Literal", "literal": {"value": DEMO_PASSPHRASE}}},
        "config": {"greeting": "Hello from a Stack"},
        "destroyOnFinalize": True,
        **({"workspaceTemplate": workspace_template} if workspace_template else {}),
    })
    return [program, stack]


def as_kubectl_yaml(obj: dict[str, Any]) -> str:
    """The object as `kubectl get -o yaml` shows it (without managedFields)."""
    shown = {k: v for k, v in obj.items()}
    shown["metadata"] = {k: v for k, v in obj.get("metadata", {}).items() if k != "managedFields"}
    return yaml.safe_dump(shown, sort_keys=False, default_flow_style=False)


def say(message: str) -> None:
    print(f"[pko dev] {message}", flush=True)


def describe(stack: dict[str, Any]) -> str:
    parts = []
    for condition in (stack.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" or condition.get("type") == "Ready":
            parts.append(f"{condition['type']}={condition['status']} {condition.get('reason', '')}"
                         + (f" ({condition['message']})" if condition.get("message") else ""))
    return "; ".join(parts) or "waiting for the operator"


async def wait_ready(client: kclient.Client, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        stack = await client.get_or_none(resources.STACK, "hello-pko", DEMO_NAMESPACE)
        if stack is not None:
            text = describe(stack)
            if text != last:
                say(f"stack hello-pko: {text}")
                last = text
            status = stack.get("status") or {}
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
            if ready and status.get("observedGeneration") == stack["metadata"].get("generation"):
                return stack
            stalled = [c for c in status.get("conditions") or [] if c.get("type") == "Stalled"
                       and c.get("status") == "True"]
            if stalled:
                raise RuntimeError(f"the Stack is stalled: {stalled[0].get('reason')}: {stalled[0].get('message')}")
        await asyncio.sleep(0.5)
    raise RuntimeError(f"the Stack did not become Ready within {timeout:.0f}s (last: {last})")


def show_ready(stack: dict[str, Any]) -> None:
    print("---")
    print(as_kubectl_yaml(stack), end="")
    print("---")
    say("the Stack is Ready. Outputs (secret values are masked on the Stack):")
    for key, value in sorted((stack["status"].get("outputs") or {}).items()):
        print(f"  {key}: {value}")


async def wait_gone(client: kclient.Client, timeout: float = 120.0) -> None:
    try:
        await waiting.wait_gone(client, resources.STACK, "hello-pko", DEMO_NAMESPACE, timeout)
    except AssertionError:
        say("warning: the Stack was not removed in time")
        return
    say("the Stack was destroyed and removed.")




async def finish(client: kclient.Client, once: bool, deleting: str) -> None:
    """After the Ready Stack is shown: with `once`, delete it (`deleting` says how) and wait until it is gone;
    otherwise keep running until SIGINT or SIGTERM."""
    if once:
        say(f"--once: deleting the Stack ({deleting}) ...")
        await client.delete(resources.STACK, "hello-pko", DEMO_NAMESPACE)
        await wait_gone(client)
        return
    say("running; edit the Program or the Stack with kubectl, or press Ctrl-C to stop.")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    say("stopping ...")
