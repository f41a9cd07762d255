"""A workspace pod's processes as the node sees them, for the fault tests that SIGKILL a container mid-`up`.

A Pulumi CLI's lock names its pid inside the pod's pid namespace; the node's /proc finds the same process through
its cgroup (which names the pod's uid) and its ``NSpid`` line. The tests kill only while that CLI is alive and
holds the lock, and read the lock again once it is dead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


def holder(pid_in_pod: int, pod_uid: str, verb: str) -> int | None:
    """The node's pid of the live Pulumi CLI running `pulumi <verb>` with pid `pid_in_pod` in the pod `pod_uid`, if
    there is one. The verb matters: an ``up``'s lock is what the fault tests strike at, and a stack's creation
    (``stack select --create`` on a bucket) holds a lock of its own for a moment, released before a kill lands."""
    marks = (pod_uid, pod_uid.replace("-", "_"))
    for entry in _clis(verb):
        try:
            if not any(mark in (entry / "cgroup").read_text() for mark in marks):
                continue
            nspid = next(line.split()[-1] for line in (entry / "status").read_text().splitlines()
                         if line.startswith("NSpid:"))
        except (OSError, StopIteration):
            continue
        if int(nspid) == pid_in_pod:
            return int(entry.name)
    return None


def _clis(verb: str) -> Iterator[Path]:
    """The /proc entries of the Pulumi CLIs that run `pulumi <verb>` now."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if Path(argv[0].decode(errors="replace")).name == "pulumi" and verb.encode() in argv[1:]:
            yield entry


def running_command(pod_uids: Iterable[str], verb: str) -> set[str]:
    """The pods among `pod_uids` in which a Pulumi CLI runs `pulumi <verb>` now (``up``, ``install``): the moment a
    fault test strikes at, read on the node rather than guessed from an Update's status."""
    marks = {mark: uid for uid in pod_uids for mark in (uid, uid.replace("-", "_"))}
    found: set[str] = set()
    for entry in _clis(verb):
        try:
            cgroup = (entry / "cgroup").read_text()
        except OSError:
            continue
        found.update(uid for mark, uid in marks.items() if mark in cgroup)
    return found


def running_with_env(verb: str, variable: str, value: str) -> list[int]:
    """The pids of the Pulumi CLIs running `pulumi <verb>` now whose environment sets `variable` to `value`: on the
    local runtime, where no pod uid tells workspaces apart, a Stack's own ``PULUMI_BACKEND_URL`` does."""
    wanted = f"{variable}={value}".encode()
    found: list[int] = []
    for entry in _clis(verb):
        try:
            if wanted in (entry / "environ").read_bytes().split(b"\0") and not dead(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def dead(pid: int) -> bool:
    """Whether the node's process `pid` is gone (or a zombie)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def container_of(pid: int) -> str | None:
    """The containerd id of the container the node's process `pid` runs in: the last component of its cgroup path
    under the pod's (kubelet's cgroupfs layout, ``/kubepods/<qos>/pod<uid>/<id>``), or None once it is gone.

    A fault test kills the container its lock holder runs in, read from the process itself: the pod's status may
    still name a container that restarted a moment before."""
    try:
        return container_in(Path(f"/proc/{pid}/cgroup").read_text())
    except OSError:
        return None


def container_in(cgroup: str) -> str | None:
    """The container id a process's ``/proc/<pid>/cgroup`` text names (cgroupfs or systemd layout), if any."""
    for line in cgroup.splitlines():
        last = line.rsplit("/", 1)[-1].removeprefix("cri-containerd-").removesuffix(".scope")
        if "/kubepods" in line and len(last) == 64 and all(c in "0123456789abcdef" for c in last):
            return last
    return None


def argv(pid: int) -> list[str]:
    """The command line of the node's process `pid` (empty once it is gone)."""
    try:
        return [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


def container_id(pod: dict[str, Any], name: str = "pulumi") -> str:
    """The containerd id of the pod's container `name`."""
    status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == name)
    return str(status["containerID"]).removeprefix("containerd://")
