"""`pko dev --runtime pod` (`make demo-cluster`): the demo on a real node, end to end in a subprocess — the
operator installed by Helm from the built image, the Stack Ready in a running workspace pod — run twice in the same
`--dir`, as a user runs the demo again:

- with `--once`: the Stack destroyed, and the cluster gone without a trace;
- then without `--once`, until SIGTERM once its Stack is Ready: the second run starts from an empty control plane
  (the first one's Helm release and Stack do not outlive it), and the orderly stop leaves nothing behind either —
  no process, mount, link or cgroup, no egress guard, the machine's cluster lock free. (`test_00_teardown` covers
  the owner SIGKILLed.)

Runs before the run's shared cluster starts (one cluster per machine at a time)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pko.testing import cluster, hostnet
from pko.testing.clusterbed import lock_free

RUNNING = "running; edit the Program or the Stack with kubectl"


@pytest.fixture
def workdir() -> Iterator[Path]:
    # a short directory: the kubelet's unix sockets live under it (see NodePaths.socket_problem)
    path = Path(tempfile.mkdtemp(prefix="pko-dev-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _dev(workdir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pko", "dev", "--runtime", "pod", "--dir", str(workdir), *extra]


def _shown_ready(out: str) -> None:
    """The demo printed its Stack Ready with its outputs (the secret one masked) and its running workspace pod."""
    stack: dict[str, Any] = yaml.safe_load(out.split("---\n")[1])
    assert stack["kind"] == "Stack"
    assert stack["status"]["outputs"]["message"] == "Hello from a Stack, pko"
    assert stack["status"]["outputs"]["token"] == "[secret]"
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in stack["status"]["conditions"])
    pods = out.split("kubectl get pods -n pko-demo -o wide):\n", 1)[1].splitlines()
    workspace = next(line.split() for line in pods if line.startswith("hello-pko-workspace-0"))
    assert workspace[1:3] == ["1/1", "Running"], pods


def _catches_sigterm(pid: int) -> bool:
    """Process `pid` has a handler for SIGTERM (its SigCgt mask in /proc), so it stops in order when sent one."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(caught & (1 << (signal.SIGTERM - 1)))


@pytest.mark.timeout(2400)  # two demos, each up to 900 s (images built first if the sources changed)
def test_pko_dev_pod_twice_in_one_dir(workdir: Path) -> None:
    net = hostnet.discover()
    node_dir = (workdir / "real-cluster").resolve()

    # 1. --once: Ready, destroyed, the cluster gone
    result = subprocess.run(_dev(workdir, "--once"), capture_output=True, text=True, timeout=900, check=False)
    out = result.stdout
    assert result.returncode == 0, out[-4000:] + result.stderr[-4000:]
    _shown_ready(out)
    assert "the Stack was destroyed and removed." in out
    assert "the cluster is gone." in out
    assert "not-for-your-eyes" not in out + result.stderr
    assert cluster.leftovers(node_dir, net) == []

    # 2. the same --dir again, running until SIGTERM
    stderr = workdir / "second.stderr"
    with stderr.open("w") as err:
        proc = subprocess.Popen(_dev(workdir), stdout=subprocess.PIPE, stderr=err, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    # a thread reads the output line by line: a select() on the pipe misses lines already in the reader's buffer
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 900
        while not any(line.startswith(f"[pko dev] {RUNNING}") for line in list(lines)):
            assert proc.poll() is None, f"pko dev ended with {proc.returncode}:\n{''.join(lines)[-4000:]}\n" \
                                        f"{stderr.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"no Ready Stack in 900s:\n{''.join(lines)[-4000:]}"
            time.sleep(0.2)
        _shown_ready("".join(lines))
        assert hostnet.guard_installed(net), "the egress guard must be in place while the cluster runs"
        assert not lock_free(), "a running cluster holds the machine's cluster lock"
        assert any(item.startswith("process") for item in cluster.leftovers(node_dir, net))
        while not _catches_sigterm(proc.pid):  # it says `running` just before it installs its handlers
            assert time.monotonic() < deadline, "pko dev never handled SIGTERM"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(300)
        reader.join(30)
    out = "".join(lines)
    assert proc.returncode == 0, out[-4000:] + stderr.read_text()[-4000:]
    assert "the cluster is gone." in out
    assert "not-for-your-eyes" not in out + stderr.read_text()
    assert cluster.leftovers(node_dir, net) == []
    assert not hostnet.guard_installed(net)
    assert lock_free(), "the stopped cluster still holds the machine's lock"
