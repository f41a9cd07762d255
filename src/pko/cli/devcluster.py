"""`pko dev --runtime pod` (`make demo-cluster`): the demo the way production runs it.

A real single-node cluster on this machine (`pko.testing.cluster`: containerd, kubelet, CoreDNS behind an egress
guard; root only), the operator installed with the Helm chart from the image built from the Dockerfile, and the
example Stack in a workspace pod running the stand-in of Pulumi's nonroot image. It prints what `pko dev` prints
plus `kubectl get pods -o wide` while the workspace pod runs; with `--once` it deletes the Stack (destroying it in
the pod) and tears the cluster down, leaving nothing on the machine; without, it tears it down on SIGINT/SIGTERM.

Every run starts from an empty control plane: the node's pods and containers never outlive a run, so the etcd data
an earlier run left under `--dir` (its Helm release, its Stack) would describe a cluster that is gone, and the
chart's install would fail on the release it names.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from pko.cli import demo
from pko.kube import client as kclient
from pko.testing import binaries, cluster, images, operator

CHART = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "pko"
OPERATOR_NAMESPACE = "pko-system"
WORKSPACE_IMAGE = "docker.io/pulumi/pulumi:3.259.0-nonroot"
WORKSPACE_SERVICE_ACCOUNT = "pulumi"
IMAGES = ("pause", "coredns", "python-base", "pko", "workspace")


def _chart() -> Path:
    if not (CHART / "Chart.yaml").exists():
        raise FileNotFoundError(f"the Helm chart is not at {CHART}: `--runtime pod` runs from a checkout")
    return CHART


def _helm_install(running: cluster.Cluster, tag: str) -> None:
    done = subprocess.run([
        str(binaries.require("helm")), f"--kubeconfig={running.kubeconfig}", "install", "pko", str(_chart()),
        "--namespace", OPERATOR_NAMESPACE, "--create-namespace", "--set", f"image.tag={tag}",
        "--set", "image.pullPolicy=IfNotPresent",
        # the workspace pods' account in the demo namespace, allowed to review the operator's tokens
        "--set", f"workspaces.serviceAccounts[0].namespace={demo.DEMO_NAMESPACE}",
        "--set", f"workspaces.serviceAccounts[0].name={WORKSPACE_SERVICE_ACCOUNT}",
        "--wait", "--timeout", "300s",
    ], capture_output=True, text=True, check=False, timeout=330)
    if done.returncode != 0:
        raise RuntimeError(f"helm install failed: {done.stderr.strip()}")


async def run(root: Path, *, once: bool, timeout: float) -> int:
    try:
        cluster.check_host()
        binaries.require("helm")
        demo.say("building (or reusing) the images: " + ", ".join(IMAGES) + " ...")
        built = await asyncio.to_thread(images.build, IMAGES)
    except (cluster.ClusterError, binaries.MissingBinaryError, images.ImageError) as err:
        demo.say(f"error: {err}")
        return 2
    workdir = root / "real-cluster"
    demo.say(f"starting a real single-node cluster in {workdir} (egress guard first) ...")
    try:
        await asyncio.to_thread(cluster.remove_workdir, workdir)  # what an earlier run left: start empty
        running = await asyncio.to_thread(cluster.start, workdir, images=built.values())
    except (cluster.ClusterError, OSError) as err:
        demo.say(f"error: the cluster did not start: {err}")
        return 1
    try:
        return await _demo(running, built["pko"], once=once, timeout=timeout)
    except RuntimeError as err:
        demo.say(f"error: {err}")
        return 1
    finally:
        demo.say("tearing the cluster down ...")
        await asyncio.to_thread(running.stop)
        demo.say("the cluster is gone.")


async def _demo(running: cluster.Cluster, pko_image: images.BuiltImage, *, once: bool, timeout: float) -> int:
    kubectl = f"KUBECONFIG={running.kubeconfig} {binaries.bin_dir() / 'kubectl'}"
    demo.say(f"node Ready; try: {kubectl} get pods -A")
    tag = pko_image.refs[0].rsplit(":", 1)[1]
    async with kclient.Client.from_kubeconfig(running.kubeconfig) as client:
        await operator.ensure_namespace(client, demo.DEMO_NAMESPACE)
        demo.say(f"installing the operator with its Helm chart (image {pko_image.refs[0]}) ...")
        await asyncio.to_thread(_helm_install, running, tag)
        template = {"spec": {"image": WORKSPACE_IMAGE, "imagePullPolicy": "IfNotPresent",
                             "serviceAccountName": WORKSPACE_SERVICE_ACCOUNT,
                             "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}}
        for obj in demo.demo_objects("file:///tmp", template):
            await client.apply(obj, field_manager="pko-dev")
            demo.say(f"applied {obj['kind']} {demo.DEMO_NAMESPACE}/{obj['metadata']['name']}")
        stack = await demo.wait_ready(client, timeout)
        demo.show_ready(stack)
        demo.say(f"the workspace pod (kubectl get pods -n {demo.DEMO_NAMESPACE} -o wide):")
        print(running.kubectl("get", "pods", "-n", demo.DEMO_NAMESPACE, "-o", "wide").stdout, end="", flush=True)
        await demo.finish(client, once, "destroyOnFinalize, in its pod")
    return 0
