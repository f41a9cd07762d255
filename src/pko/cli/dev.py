"""`pko dev`: the whole operator on this machine, no cluster needed — the README's main job (`make demo`).

It starts a local control plane (etcd + kube-apiserver, data under `--dir`), installs the CRDs, runs the operator
with the `local` workspace runtime, applies an example Program and Stack (file backend, passphrase secrets),
shows progress, prints the Stack the way `kubectl get stack -o yaml` would, and keeps running until Ctrl-C
(`--once` tears everything down after the first Ready). Every failure is reported as one clear sentence.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from pko.cli import logs
from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import binaries, controlplane, operator, pulumi, waiting

DEMO_NAMESPACE = "pko-demo"
DEMO_PASSPHRASE = "pko-demo-passphrase"
REQUIRED = ("etcd", "kube-apiserver", "pulumi", "pulumi-language-yaml")


def demo_objects(state_dir: Path) -> list[dict[str, Any]]:
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
        "backend": f"file://{state_dir}",
        "envRefs": {"PULUMI_CONFIG_PASSPHRASE": {"type": "Literal", "literal": {"value": DEMO_PASSPHRASE}}},
        "config": {"greeting": "Hello from a Stack"},
        "destroyOnFinalize": True,
    })
    return [program, stack]


def as_kubectl_yaml(obj: dict[str, Any]) -> str:
    """The object as `kubectl get -o yaml` shows it (without managedFields)."""
    shown = {k: v for k, v in obj.items()}
    shown["metadata"] = {k: v for k, v in obj.get("metadata", {}).items() if k != "managedFields"}
    return yaml.safe_dump(shown, sort_keys=False, default_flow_style=False)


def _say(message: str) -> None:
    print(f"[pko dev] {message}", flush=True)


def _describe(stack: dict[str, Any]) -> str:
    parts = []
    for condition in (stack.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" or condition.get("type") == "Ready":
            parts.append(f"{condition['type']}={condition['status']} {condition.get('reason', '')}"
                         + (f" ({condition['message']})" if condition.get("message") else ""))
    return "; ".join(parts) or "waiting for the operator"


async def _wait_ready(client: kclient.Client, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        stack = await client.get_or_none(resources.STACK, "hello-pko", DEMO_NAMESPACE)
        if stack is not None:
            text = _describe(stack)
            if text != last:
                _say(f"stack hello-pko: {text}")
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


async def run(args: argparse.Namespace) -> int:
    root: Path = args.dir.resolve()
    root.mkdir(parents=True, exist_ok=True)
    try:
        for name in REQUIRED:
            binaries.require(name)
    except binaries.MissingBinaryError as err:
        _say(f"error: {err}")
        return 2
    os.environ.update(pulumi.pulumi_env(root / "pulumi", dict(os.environ)))
    state = root / "pulumi-state"
    state.mkdir(exist_ok=True)

    _say(f"starting a local control plane (etcd + kube-apiserver) in {root / 'cluster'} ...")
    try:
        cp = await asyncio.to_thread(controlplane.start, root / "cluster")
    except (controlplane.ControlPlaneError, OSError) as err:
        _say(f"error: the control plane did not start: {err}")
        return 1
    with cp:
        _say(f"API server at {cp.server}; kubeconfig: {cp.kubeconfig}")
        _say(f"  try: KUBECONFIG={cp.kubeconfig} {binaries.bin_dir() / 'kubectl'} get stacks -A")
        async with kclient.Client.from_kubeconfig(cp.kubeconfig) as client:
            await operator.install_crds(client)
            await operator.install_identity(client)
            await operator.ensure_namespace(client, DEMO_NAMESPACE)
            _say("CRDs installed; starting the operator (workspace runtime: local) ...")
            async with operator.running(cp.kubeconfig, root / "workspaces"):
                for obj in demo_objects(state):
                    await client.apply(obj, field_manager="pko-dev")
                    _say(f"applied {obj['kind']} {DEMO_NAMESPACE}/{obj['metadata']['name']}")
                try:
                    stack = await _wait_ready(client, args.timeout)
                except RuntimeError as err:
                    _say(f"error: {err}")
                    return 1
                print("---")
                print(as_kubectl_yaml(stack), end="")
                print("---")
                _say("the Stack is Ready. Outputs (secret values are masked on the Stack):")
                for key, value in sorted((stack["status"].get("outputs") or {}).items()):
                    print(f"  {key}: {value}")
                if args.once:
                    _say("--once: deleting the Stack (destroyOnFinalize) and shutting down ...")
                    await client.delete(resources.STACK, "hello-pko", DEMO_NAMESPACE)
                    await _wait_gone(client)
                    return 0
                _say("running; edit the Program or the Stack with kubectl, or press Ctrl-C to stop.")
                stop = asyncio.Event()
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(sig, stop.set)
                await stop.wait()
                _say("stopping ...")
    return 0


async def _wait_gone(client: kclient.Client, timeout: float = 120.0) -> None:
    try:
        await waiting.wait_gone(client, resources.STACK, "hello-pko", DEMO_NAMESPACE, timeout)
    except AssertionError:
        _say("warning: the Stack was not removed in time")
        return
    _say("the Stack was destroyed and removed.")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pko dev", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dir", type=Path, default=Path(".pko/dev"), help="where the cluster and state live")
    parser.add_argument("--once", action="store_true", help="tear down after the Stack is Ready")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the Stack")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the operator's logs")
    args = parser.parse_args(argv)
    logs.configure(logging.INFO if args.verbose else logging.WARNING)
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(run(args))
    return 130


if __name__ == "__main__":
    sys.exit(main())
