"""The container a workspace pod's process runs in, read from its cgroup: what the fault tests kill."""

from __future__ import annotations

from pko.testing import podprocs

CID = "4f" * 32


def test_the_container_is_the_last_component_under_the_pod_in_the_cgroupfs_layout() -> None:
    text = (f"12:pids:/kubepods/besteffort/pod1b2c-77/{CID}\n"
            f"4:cpu,cpuacct:/kubepods/besteffort/pod1b2c-77/{CID}\n0::/\n")
    assert podprocs.container_in(text) == CID


def test_the_systemd_layout_names_it_in_a_scope() -> None:
    text = f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-pod1b2c.slice/cri-containerd-{CID}.scope\n"
    assert podprocs.container_in(text) == CID


def test_a_process_outside_any_pod_or_in_the_pod_cgroup_itself_names_none() -> None:
    assert podprocs.container_in(f"4:cpu,cpuacct:/user.slice/{CID}\n0::/\n") is None
    assert podprocs.container_in("4:cpu,cpuacct:/kubepods/besteffort/pod1b2c-77\n") is None
