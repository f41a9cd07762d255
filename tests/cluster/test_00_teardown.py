"""The cluster changes the machine (iptables, bridges, mounts, cgroups, processes): it must leave nothing behind,
whether it is stopped or its owner is killed with SIGKILL, and the egress guard must be in place while it runs.

This runs before the package's shared cluster starts (only one cluster can run on a machine at a time).
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pko.testing import cluster, hostnet, images


def _lock_free() -> bool:
    fd = os.open(cluster.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def _up(workdir: Path) -> subprocess.Popen[str]:
    """`python -m pko.testing.cluster up` with the two images the node itself needs; returns once it is Ready."""
    proc = subprocess.Popen([sys.executable, "-m", "pko.testing.cluster", "up", str(workdir),
                             "--images", "pause,coredns"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            line = proc.stdout.readline()
            if line.startswith("KUBECONFIG="):
                return proc
        if proc.poll() is not None:
            pytest.fail(f"the cluster did not start:\n{proc.stderr.read() if proc.stderr else ''}")
    proc.kill()
    pytest.fail("the cluster did not become ready in 300s")


@pytest.mark.parametrize("ending", ["sigkill", "sigterm"])
def test_nothing_is_left_behind(tmp_path: Path, ending: str) -> None:
    images.built("pause"), images.built("coredns")  # fail with `make images` in the message when missing
    net = hostnet.discover()
    assert cluster.leftovers(tmp_path, net) == [], "the machine was not clean before the test"
    proc = _up(tmp_path)
    try:
        assert hostnet.guard_installed(net), "the egress guard must be in place while the cluster runs"
        assert not _lock_free(), "a running cluster holds the machine's cluster lock"
        running = cluster.leftovers(tmp_path, net)
        assert any(item.startswith("process") for item in running)
        assert f"link {net.bridge}" in running  # a pod (CoreDNS) really joined the CNI bridge
    finally:
        if ending == "sigkill":
            proc.kill()  # the reaper must tear the cluster down on its own
        else:
            proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    deadline = time.monotonic() + 180
    while not _lock_free() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _lock_free(), "the reaper did not finish its teardown in 180s"
    assert cluster.leftovers(tmp_path, net) == []
    assert not hostnet.guard_installed(net)
