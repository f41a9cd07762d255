"""`kubectl pko` found the way users run it: through kubectl's own plugin lookup (an executable named
`kubectl-pko` on PATH), not by calling the console script directly. `kubectl plugin list` names it, and
`kubectl pko get` run through the real kubectl reads the real control plane."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import binaries, controlplane

SCRIPTS = Path(sys.executable).parent  # where pip put the `kubectl-pko` console script


def kubectl(*args: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{SCRIPTS}{os.pathsep}{os.environ.get('PATH', '')}",
           "KUBECONFIG": str(kubeconfig)}
    return subprocess.run([str(binaries.require("kubectl")), *args], env=env, capture_output=True, text=True,
                          timeout=60, check=False)


async def test_kubectl_finds_the_plugin_and_runs_it(kc: kclient.Client, namespace: str,
                                                    cluster: controlplane.ControlPlane) -> None:
    listed = kubectl("plugin", "list", kubeconfig=cluster.kubeconfig)
    assert str(SCRIPTS / "kubectl-pko") in listed.stdout, (listed.stdout, listed.stderr)

    await kc.create(resources.STACK.new("through-kubectl", namespace, spec={"stack": "dev", "projectRepo": "x"}))
    got = kubectl("pko", "get", "-n", namespace, kubeconfig=cluster.kubeconfig)
    assert got.returncode == 0, got.stderr
    assert "through-kubectl" in got.stdout, got.stdout

    missing = kubectl("pko", "describe", "no-such-stack", "-n", namespace, kubeconfig=cluster.kubeconfig)
    assert missing.returncode == 1, (missing.stdout, missing.stderr)
    assert "not found" in missing.stderr
