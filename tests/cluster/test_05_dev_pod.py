"""`pko dev --runtime pod --once` (`make demo-cluster`): the demo on a real node, end to end in a subprocess — the
operator installed by Helm from the built image, the Stack Ready in a running workspace pod, destroyed, and the
cluster gone without a trace. Runs before the package's shared cluster (one cluster per machine at a time)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from pko.testing import cluster


def test_pko_dev_pod_once() -> None:
    # a short directory: the kubelet's unix sockets live under it (see NodePaths.socket_problem)
    workdir = Path(tempfile.mkdtemp(prefix="pko-dev-", dir="/tmp"))
    result = subprocess.run([sys.executable, "-m", "pko", "dev", "--runtime", "pod", "--once", "--dir", str(workdir)],
                            capture_output=True, text=True, timeout=900, check=False)
    out = result.stdout
    assert result.returncode == 0, out[-4000:] + result.stderr[-4000:]
    stack = yaml.safe_load(out.split("---\n")[1])
    assert stack["kind"] == "Stack"
    assert stack["status"]["outputs"]["message"] == "Hello from a Stack, pko"
    assert stack["status"]["outputs"]["token"] == "[secret]"
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in stack["status"]["conditions"])
    pods = out.split("kubectl get pods -n pko-demo -o wide):\n", 1)[1].splitlines()
    workspace = next(line.split() for line in pods if line.startswith("hello-pko-workspace-0"))
    assert workspace[1:3] == ["1/1", "Running"], pods
    assert "the Stack was destroyed and removed." in out
    assert "the cluster is gone." in out
    assert "not-for-your-eyes" not in out + result.stderr
    assert cluster.leftovers((workdir / "real-cluster").resolve()) == []
    shutil.rmtree(workdir, ignore_errors=True)
