"""`pko dev`: the whole operator on this machine, no cluster needed — the README's main job (`make demo`).

It starts a local control plane (etcd + kube-apiserver, data under `--dir`), installs the CRDs, runs the operator
with the `local` workspace runtime, applies an example Program and Stack (file backend, passphrase secrets),
shows progress, prints the Stack the way `kubectl get stack -o yaml` would, and keeps running until Ctrl-C
(`--once` tears everything down after the first Ready). Every failure is reported as one clear sentence.

`--runtime pod` runs the same demo the way production does, on a real single-node cluster of this machine
(`pko.testing.cluster`, root only): the operator is installed with the Helm chart from the image built from the
Dockerfile, and the Stack runs in a workspace pod (`make demo-cluster`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pko.cli import demo, logs
from pko.kube import client as kclient
from pko.runtime import eventloop
from pko.testing import binaries, controlplane, operator, pulumi

REQUIRED = ("etcd", "kube-apiserver", "pulumi", "pulumi-language-yaml")

async def run(args: argparse.Namespace) -> int:
    root: Path = args.dir.resolve()
    root.mkdir(parents=True, exist_ok=True)
    if args.runtime == "pod":
        from pko.cli import devcluster  # the real cluster's imports are only needed here

        return await devcluster.run(root, once=args.once, timeout=args.timeout)
    try:
        for name in REQUIRED:
            binaries.require(name)
    except binaries.MissingBinaryError as err:
        demo.say(f"error: {err}")
        return 2
    os.environ.update(pulumi.pulumi_env(root / "pulumi", dict(os.environ)))
    state = root / "pulumi-state"
    state.mkdir(exist_ok=True)

    demo.say(f"starting a local control plane (etcd + kube-apiserver) in {root / 'cluster'} ...")
    try:
        cp = await asyncio.to_thread(controlplane.start, root / "cluster")
    except (controlplane.ControlPlaneError, OSError) as err:
        demo.say(f"error: the control plane did not start: {err}")
        return 1
    with cp:
        demo.say(f"API server at {cp.server}; kubeconfig: {cp.kubeconfig}")
        demo.say(f"  try: KUBECONFIG={cp.kubeconfig} {binaries.bin_dir() / 'kubectl'} get stacks -A")
        async with kclient.Client.from_kubeconfig(cp.kubeconfig) as client:
            await operator.install_crds(client)
            await operator.install_identity(client)
            await operator.ensure_namespace(client, demo.DEMO_NAMESPACE)
            demo.say("CRDs installed; starting the operator (workspace runtime: local) ...")
            async with operator.running(cp.kubeconfig, root / "workspaces"):
                for obj in demo.demo_objects(f"file://{state}"):
                    await client.apply(obj, field_manager="pko-dev")
                    demo.say(f"applied {obj['kind']} {demo.DEMO_NAMESPACE}/{obj['metadata']['name']}")
                try:
                    stack = await demo.wait_ready(client, args.timeout)
                except RuntimeError as err:
                    demo.say(f"error: {err}")
                    return 1
                demo.show_ready(stack)
                await demo.finish(client, args.once, "destroyOnFinalize, then shutting down")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pko dev", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dir", type=Path, default=Path(".pko/dev"), help="where the cluster and state live")
    parser.add_argument("--once", action="store_true", help="tear down after the Stack is Ready")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the Stack")
    parser.add_argument("--runtime", choices=("local", "pod"), default="local",
                        help="local: agents as processes (default, fast); pod: a real single-node cluster (root)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the operator's logs")
    args = parser.parse_args(argv)
    logs.configure(logging.INFO if args.verbose else logging.WARNING)
    with contextlib.suppress(KeyboardInterrupt):
        return eventloop.run(run(args))
    return 130


if __name__ == "__main__":
    sys.exit(main())
