"""The cluster changes the machine (iptables, bridges, mounts, cgroups, processes): it must leave nothing behind
when its owner is killed with SIGKILL (the reaper tears it down), and the egress guard must be in place while it
runs. The orderly stop (SIGTERM) is checked by `test_05_dev_pod`, on `pko dev`'s cluster.

This runs before the run's shared cluster starts (only one cluster can run on a machine at a time).
"""

from __future__ import annotations

import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pko.testing import cluster, hostnet, images
from pko.testing.clusterbed import lock_free


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


def test_nothing_is_left_behind_after_sigkill(tmp_path: Path) -> None:
    images.built("pause"), images.built("coredns")  # fail with `make images` in the message when missing
    net = hostnet.discover()
    if cluster.leftovers(tmp_path, net):
        # what an earlier run that was itself killed left (seen: its containerd cgroups) is swept first, as every
        # cluster start and `pko dev` sweep; this test is about the teardown of the cluster it starts
        cluster.sweep()
        cluster.teardown(tmp_path, net)
    assert cluster.leftovers(tmp_path, net) == [], "the machine was not clean before the test, even after a sweep"
    proc = _up(tmp_path)
    try:
        assert hostnet.guard_installed(net), "the egress guard must be in place while the cluster runs"
        assert not lock_free(), "a running cluster holds the machine's cluster lock"
        running = cluster.leftovers(tmp_path, net)
        assert any(item.startswith("process") for item in running)
        assert f"link {net.bridge}" in running  # a pod (CoreDNS) really joined the CNI bridge
    finally:
        proc.kill()  # the reaper must tear the cluster down on its own
        proc.wait(120)
    deadline = time.monotonic() + 180
    while not lock_free() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert lock_free(), "the reaper did not finish its teardown in 180s"
    assert cluster.leftovers(tmp_path, net) == []
    assert not hostnet.guard_installed(net)
