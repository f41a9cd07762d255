"""A real single-node Kubernetes cluster on this machine: the production path's test bed.

The control plane of :mod:`pko.testing.controlplane` (etcd, kube-apiserver, kube-controller-manager), plus
kube-scheduler, containerd, kubelet, kube-proxy and CoreDNS, all from binaries `make tools` builds and images
`make images` builds (:mod:`pko.testing.images`). Pods are real containers (runc), Services are real iptables
rules, DNS is real; nothing is pulled from a registry.

It changes the machine (iptables, a bridge, mounts, cgroups, sysctls), so it is careful about three things:

* **Network safety.** The egress guard of :mod:`pko.testing.hostnet` is installed before anything starts and
  removed last: no packet for a pod, Service or other private-range address leaves the machine.
* **One at a time.** The node's ports and address ranges are fixed, so a start takes an exclusive lock
  (``/run/pko-cluster.lock``) and says who holds it when it cannot.
* **Nothing left behind.** :meth:`Cluster.stop` tears everything down. A *reaper* process, started first, holds the
  lock too and waits on a pipe from its owner: if the owner dies without stopping the cluster (a SIGKILLed test
  run), the reaper tears it down. Teardown needs only the work directory and the state file, and a start first
  sweeps whatever an earlier run left, so the next run always begins from a clean machine.
  :func:`leftovers` lists what remains (a test asserts it is empty).

Readiness is always polled (API objects, sockets), never waited for with a fixed sleep.

Usage (also ``python -m pko.testing.cluster up|down|status``)::

    with cluster.start(workdir) as c:
        c.kubectl("get", "nodes")
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pko.testing import binaries, controlplane, hostnet, nodeconfig, ports

LOCK_FILE = Path("/run/pko-cluster.lock")
STATE_FILE = Path("/run/pko-cluster.json")
#: Debian's runc, the CNI plugins (bridge, host-local, portmap) and iptables. containerd is the one `make tools`
#: builds (:data:`CONTAINERD_BINARIES`): Debian 12's 1.6 has no `image` volumes.
HOST_TOOLS = ("iptables", "ip")
#: containerd 2, its runc shim and `ctr`, from `make tools`.
CONTAINERD_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr")
#: The image store's folder under :func:`cache_dir`, by containerd's major version: containerd 1.6's store (the
#: folder `containerd`, from before the node moved to containerd 2) is left alone, so a checkout of either kind
#: never opens the other's.
IMAGE_STORE = "containerd-2"
CNI_PLUGINS = ("bridge", "host-local", "portmap", "loopback")
#: The sysctls the node needs; their previous values are restored at teardown.
SYSCTLS = {
    "net/ipv4/ip_forward": "1",
    "net/bridge/bridge-nf-call-iptables": "1",
}
#: cgroup directories (under every v1 controller) that kubelet and containerd create.
CGROUP_ROOTS = ("kubepods", "k8s.io")
#: Paths outside the work directory that kubelet and containerd hard-code.
HARDCODED_PATHS = (
    Path("/var/lib/kubelet/device-plugins/kubelet.sock"),
    Path("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"),
    Path("/var/lib/kubelet/device-plugins"),
    Path("/var/lib/kubelet"),
    Path("/run/containerd/s"),
    Path("/run/containerd/fifo"),
    Path("/run/containerd/runc"),
    Path("/run/containerd"),
    Path("/var/log/containers"),
    Path("/var/log/pods"),
)


class ClusterError(RuntimeError):
    """The cluster could not be started (or stopped); the message says what and quotes the logs."""


def cache_dir() -> Path:
    """Where state that outlives a run is kept: containerd's image store (imports are slow, images don't change
    unless their content does)."""
    configured = os.environ.get("PKO_CLUSTER_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "pko" / "cluster"


@dataclass
class Cluster:
    """A running cluster. Build it with :func:`start`; stop it with :meth:`stop` (or use it as a context)."""

    workdir: Path
    net: hostnet.Network
    paths: nodeconfig.NodePaths
    control_plane: controlplane.ControlPlane
    _processes: list[controlplane.Process] = field(default_factory=list)
    _reaper: subprocess.Popen[bytes] | None = None
    _reaper_pipe: int | None = None
    _lock_fd: int | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.kubeconfig

    @property
    def node_ip(self) -> str:
        """This machine's address, which pods reach (a git server for pods listens here)."""
        return self.net.node_ip

    @property
    def audit_log(self) -> Path:
        """The API server's audit log: a JSON line of metadata per request (who, verb, resource, when)."""
        return audit_log_path(self.workdir)

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    def logs(self, lines: int = 30) -> str:
        """The last lines of every component's log, for a failure report."""
        own = "\n".join(f"--- {p.name} ({p.log_path})\n{p.tail(lines)}" for p in self._processes)
        return f"{self.control_plane.logs(lines)}\n{own}"

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True,
                timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this cluster."""
        result = subprocess.run(
            [str(binaries.require("kubectl")), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin, capture_output=True, text=True, timeout=timeout, check=False,
        )
        if check and result.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def ctr(self, *args: str, check: bool = True) -> str:
        """Run containerd's `ctr` in the Kubernetes namespace of this node's containerd."""
        return _run([str(binaries.require("ctr")), "-a", str(self.paths.containerd_socket), "-n", "k8s.io", *args],
                    check=check)

    def api_get(self, path: str) -> dict[str, Any] | None:
        """GET a path of the API server as the admin (None on 404)."""
        return _api_get(self.control_plane, path)

    def import_image(self, archive: Path, refs: Sequence[str], key: str) -> bool:
        """Import an OCI archive into containerd unless every ref is already there with the same content key.
        Returns whether it imported."""
        present = _image_keys(self.ctr("images", "ls"))
        if all(present.get(ref) == key for ref in refs):
            return False
        self.ctr("images", "import", str(archive))
        imported = _image_keys(self.ctr("images", "ls"))
        for ref in refs:
            if ref not in imported:
                raise ClusterError(f"{archive} did not provide the image {ref}")
            self.ctr("images", "label", ref, f"{IMAGE_KEY_LABEL}={key}")
        return True

    def trust_registry(self, address: str) -> None:
        """Let the node pull from the test bed's plain-HTTP registry at `address` (``host:port``), as a platform
        team points its nodes at its own registry (containerd reads the file at each pull: no restart)."""
        hosts = self.paths.registry_hosts / address / "hosts.toml"
        hosts.parent.mkdir(parents=True, exist_ok=True)
        hosts.write_text(nodeconfig.plain_http_hosts_toml(address))

    def remove_images(self, digests: Iterable[str]) -> list[str]:
        """Remove every image whose manifest is one of `digests` — under any name, the runtime's own
        ``sha256:<id>`` ones too — and what only they used, so a pull of the same content fetches and unpacks it
        again; the refs removed."""
        wanted = set(digests)
        refs = [parts[0] for line in self.ctr("images", "ls").splitlines()[1:]
                if len(parts := line.split()) > 2 and parts[2] in wanted]
        if refs:
            self.ctr("images", "rm", "--sync", *refs)
        return refs

    def tag_image(self, source: str, target: str) -> None:
        """Give an imported image another name (e.g. a chart's numeric tag)."""
        self.ctr("images", "rm", target, check=False)
        self.ctr("images", "tag", source, target)

    def stop(self) -> None:
        """Tear everything down (see :func:`teardown`) and release the lock."""
        try:
            teardown(self.workdir, self.net)
            self.control_plane.stop()  # already gone: this reaps them and closes their logs
            for process in self._processes:
                process.stop()
        finally:
            self._release()

    def _release(self) -> None:
        if self._reaper_pipe is not None:
            with contextlib.suppress(OSError):
                os.write(self._reaper_pipe, b"done")
                os.close(self._reaper_pipe)
            self._reaper_pipe = None
        if self._reaper is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._reaper.wait(30)
            self._reaper = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


IMAGE_KEY_LABEL = "pko.test/key"


def audit_log_path(workdir: Path) -> Path:
    return workdir / "control-plane" / "audit" / "audit.log"


def _image_keys(listing: str) -> dict[str, str]:
    """ref → the value of our key label ('' when unlabelled), from `ctr images ls` output."""
    keys: dict[str, str] = {}
    for line in listing.splitlines()[1:]:
        parts = line.split()
        if not parts:
            continue
        labels = [item for part in parts[1:] for item in part.split(",")]
        keys[parts[0]] = next((item.split("=", 1)[1] for item in labels if item.startswith(f"{IMAGE_KEY_LABEL}=")), "")
    return keys


def _run(argv: Sequence[str], *, check: bool = True, timeout: float = 120.0) -> str:
    try:
        result = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=timeout)
    except FileNotFoundError as err:
        raise ClusterError(f"{argv[0]} is not installed: run `make tools` (it installs the Debian packages)") from err
    if check and result.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout


def _api_get(cp: controlplane.ControlPlane, path: str) -> dict[str, Any] | None:
    request = urllib.request.Request(f"{cp.server}{path}", headers={"Authorization": f"Bearer {cp.admin_token}"})
    context = ssl.create_default_context(cafile=str(cp.ca_file))
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            data: dict[str, Any] = json.load(response)
            return data
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise


# --- preconditions -------------------------------------------------------------------------------------------------


def check_host() -> None:
    """Fail with one clear sentence when this machine cannot run the node."""
    if os.geteuid() != 0:
        raise ClusterError("the real cluster needs root (iptables, mounts, containerd); run the tests as root")
    missing = [tool for tool in HOST_TOOLS if not _which(tool)]
    if not Path("/usr/sbin/runc").exists():
        missing.append("runc")
    missing += [f"CNI plugin {p}" for p in CNI_PLUGINS if not Path(f"/usr/lib/cni/{p}").exists()]
    if missing:
        raise ClusterError(f"missing on this machine: {', '.join(missing)}; run `make tools` as root "
                           "(it installs runc, containernetworking-plugins and iptables)")
    for name in ("kubelet", "kube-proxy", "kube-scheduler", "kube-controller-manager", "crictl", "kubectl",
                 *CONTAINERD_BINARIES):
        binaries.require(name)


def _which(tool: str) -> bool:
    return any(Path(d, tool).exists() for d in [*os.environ.get("PATH", "").split(os.pathsep), "/usr/sbin", "/sbin"])


# --- the lock, the state file and the reaper -----------------------------------------------------------------------


def _lock() -> int:
    fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        owner = _read_state().get("workdir", "unknown")
        raise ClusterError(f"another pko test cluster runs on this machine (work dir {owner}); stop it first "
                           "(`python -m pko.testing.cluster down`) or wait for it") from None
    return fd


def _read_state() -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(STATE_FILE.read_text())
        return data
    except (OSError, ValueError):
        return {}


def _write_state(workdir: Path, net: hostnet.Network, sysctls: dict[str, str]) -> None:
    STATE_FILE.write_text(json.dumps({
        "workdir": str(workdir), "node_ip": net.node_ip, "uplink": net.uplink,
        "nameservers": list(net.nameservers), "sysctls": sysctls,
    }))


def _spawn_reaper(lock_fd: int) -> tuple[subprocess.Popen[bytes], int]:
    """A process that tears the cluster down if we die without doing it (it shares our lock)."""
    read_end, write_end = os.pipe()
    reaper = subprocess.Popen(
        [sys.executable, "-m", "pko.testing.cluster", "reap", str(read_end)],
        pass_fds=(read_end, lock_fd), start_new_session=True, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    os.close(read_end)
    return reaper, write_end


def reap(pipe_fd: int) -> None:
    """The reaper's body: wait for the owner; unless it said "done", tear the cluster down."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    message = b""
    while True:
        chunk = os.read(pipe_fd, 16)
        if not chunk:
            break
        message += chunk
    if message != b"done":
        sweep()


def sweep() -> None:
    """Tear down whatever cluster the state file names (a no-op when there is none)."""
    state = _read_state()
    if not state:
        return
    net = hostnet.Network(node_ip=state["node_ip"], uplink=state["uplink"],
                          nameservers=tuple(state.get("nameservers", ())))
    teardown(Path(state["workdir"]), net)


# --- teardown ------------------------------------------------------------------------------------------------------


def _pids_with(*markers: str) -> list[int]:
    """Processes whose command line mentions one of `markers` (every daemon of ours names the work directory or,
    for containerd's shims, its state directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if any(marker in command for marker in markers):
                found.append(int(entry.name))
    return found


def _cgroup_pids() -> list[int]:
    """Processes in the pod cgroups (containers whose shim died are reparented but stay in their cgroup)."""
    found: set[int] = set()
    for root in CGROUP_ROOTS:
        base = Path("/sys/fs/cgroup/pids") / root
        for folder, _, files in os.walk(base):  # os.walk skips a cgroup that vanishes while it is read (rglob raised)
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError, ValueError):
                    found.update(int(line) for line in Path(folder, "cgroup.procs").read_text().split())
    return sorted(found)


def _kill(pids: Iterable[int], grace: float = 10.0) -> None:
    pids = [p for p in pids if p != os.getpid()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _mounts_under(prefixes: Sequence[Path]) -> list[str]:
    points = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        point = line.split()[1].replace("\\040", " ")
        if any(point == str(p) or point.startswith(f"{p}/") for p in prefixes) or point.startswith("/run/netns/cni-"):
            points.append(point)
    return sorted(points, key=len, reverse=True)


def _paths_for(workdir: Path) -> nodeconfig.NodePaths:
    return nodeconfig.NodePaths(root=workdir / "node", containerd_root=cache_dir() / IMAGE_STORE)


def teardown(workdir: Path, net: hostnet.Network) -> None:
    """Remove the cluster that ran in `workdir`: pods, daemons, mounts, network, cgroups, sysctls. Idempotent."""
    paths = _paths_for(workdir)
    markers = (str(workdir), str(paths.containerd_state))
    # kubelet first, or it recreates what we remove; then the pods through the CRI so CNI DEL runs (with a long
    # timeout: crictl's default 2 s kills the bridge plugin mid-DEL and leaks its nat chains).
    _kill([p for p in _pids_with(*markers) if _is(p, ("kubelet", "kube-proxy"))])
    if paths.containerd_socket.exists() and _pids_with(str(paths.containerd_config)):
        with contextlib.suppress(ClusterError, subprocess.TimeoutExpired, OSError):
            _run([str(binaries.bin_dir() / "crictl"), "-r", f"unix://{paths.containerd_socket}", "-t", "60s",
                  "rmp", "-fa"], check=False, timeout=90)
    _kill(_cgroup_pids(), grace=2.0)
    # the control plane, containerd and its shims: the API server's clients first, for on SIGTERM it waits up to
    # 60 s for their requests to end (it was always SIGKILLed after the 10 s grace); then it, then etcd, its store
    stage_of = {"kube-apiserver": 1, "etcd": 2}
    daemons = {pid: stage_of.get(Path(_command(pid)).name, 0) for pid in _pids_with(*markers)}
    for stage in range(3):
        _kill([pid for pid, of in daemons.items() if of == stage])
    for point in _mounts_under([workdir, paths.containerd_root, paths.containerd_state]):
        _run(["umount", "-l", point], check=False)
    hostnet.sweep(net)
    state = _read_state()
    if state.get("workdir") == str(workdir):
        for key, value in (state.get("sysctls") or {}).items():
            with contextlib.suppress(OSError):
                Path("/proc/sys", key).write_text(value)
    for controller in Path("/sys/fs/cgroup").iterdir():
        for root in CGROUP_ROOTS:
            base = controller / root
            for folder, _, _ in os.walk(base, topdown=False):  # deepest first; a vanished cgroup is skipped
                with contextlib.suppress(OSError):
                    Path(folder).rmdir()
    for path in HARDCODED_PATHS:
        with contextlib.suppress(OSError):
            if path.is_dir():
                _remove_tree(path)
            else:
                path.unlink()
    for volatile in (paths.containerd_state, paths.kubelet_root, paths.cni_ipam_dir):
        _remove_tree(volatile)
    if state.get("workdir") == str(workdir):
        with contextlib.suppress(OSError):
            STATE_FILE.unlink()


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return ""


def _is(pid: int, names: Sequence[str]) -> bool:
    return Path(_command(pid)).name in names


def _remove_tree(path: Path) -> None:
    """Delete a directory tree that may hold read-only bits (a container's rootfs copy) and stale mounts."""
    if not path.exists():
        return
    for point in _mounts_under([path]):
        _run(["umount", "-l", point], check=False)
    _run(["rm", "-rf", "--one-file-system", str(path)], check=False)


def leftovers(workdir: Path, net: hostnet.Network | None = None) -> list[str]:
    """Everything of a cluster in `workdir` still on the machine (empty when the teardown was complete)."""
    net = net or hostnet.discover()
    paths = _paths_for(workdir)
    found = [f"process {pid}: {_command(pid)}" for pid in _pids_with(str(workdir), str(paths.containerd_state))
             if _alive(pid)]
    found += [f"pod process {pid}" for pid in _cgroup_pids() if _alive(pid)]
    found += [f"mount {point}" for point in _mounts_under([workdir, paths.containerd_root, paths.containerd_state])]
    if paths.containerd_state.exists():
        found.append(f"directory {paths.containerd_state}")
    found += hostnet.leftovers(net)
    found += [f"cgroup {c / r}" for c in Path("/sys/fs/cgroup").iterdir() for r in CGROUP_ROOTS if (c / r).exists()]
    if STATE_FILE.exists():
        found.append(f"state file {STATE_FILE}")
    return found


def remove_workdir(workdir: Path) -> None:
    """Remove a stopped cluster's work directory (etcd's data, certificates, logs) so that the next start in it
    begins from an empty control plane, not from objects that name pods and releases of a node long gone. Takes
    the machine's lock, so it refuses while any cluster runs; first sweeps whatever a killed run left."""
    workdir = workdir.resolve()
    if not workdir.exists():
        return
    lock_fd = _lock()
    try:
        sweep()
        _remove_tree(workdir)
    finally:
        os.close(lock_fd)


# --- start ---------------------------------------------------------------------------------------------------------


def start(workdir: Path, *, images: Iterable[Any] = (), timeout: float = 180.0,
          storage_helper_image: str | None = None) -> Cluster:
    """Start the cluster with its state and logs under `workdir`; import `images` (``images.BuiltImage``s). With
    `storage_helper_image` (an imported image with a shell), the cluster also gets a default StorageClass whose
    provisioner (local-path-provisioner, built by `make tools`) runs its helper pods in that image.

    Returns once the node is Ready and CoreDNS answers. On any failure, everything started so far is removed.
    """
    check_host()
    workdir = workdir.resolve()
    problem = _paths_for(workdir).socket_problem()
    if problem is not None:
        raise ClusterError(problem)
    workdir.mkdir(parents=True, exist_ok=True)
    lock_fd = _lock()
    try:
        sweep()  # whatever an earlier run left behind
        net = hostnet.discover()
        sysctls = {key: Path("/proc/sys", key).read_text().strip() for key in SYSCTLS
                   if Path("/proc/sys", key).exists()}
        _write_state(workdir, net, sysctls)
        reaper, pipe = _spawn_reaper(lock_fd)
    except BaseException:
        os.close(lock_fd)
        raise
    paths = _paths_for(workdir)
    cluster: Cluster | None = None
    try:
        hostnet.install_guard(net)
        for key, value in SYSCTLS.items():
            if key in sysctls:
                Path("/proc/sys", key).write_text(value)
        cp = controlplane.start(workdir / "control-plane", timeout=timeout, node=controlplane.NodeOptions(
            address=net.node_ip, service_cidr=net.service_cidr, kubernetes_service_ip=net.kubernetes_service_ip,
            audit_log=audit_log_path(workdir)))
        cluster = Cluster(workdir, net, paths, cp, _reaper=reaper, _reaper_pipe=pipe, _lock_fd=lock_fd)
        _start_node(cluster, timeout)
        for image in images:
            cluster.import_image(image.archive, image.refs, image.key)
        _wait_node_ready(cluster, timeout)
        cluster.kubectl("apply", "-f", "-", stdin=_yaml_stream(nodeconfig.coredns_objects(net.dns_service_ip)))
        _wait_deployment(cluster, "kube-system", "coredns", timeout)
        if storage_helper_image is not None:
            _start_storage(cluster, storage_helper_image)
    except BaseException as err:
        if cluster is not None:
            report = cluster.logs()
            cluster.stop()
        else:
            teardown(workdir, net)
            with contextlib.suppress(OSError):
                os.write(pipe, b"done")
                os.close(pipe)
            reaper.wait(30)
            os.close(lock_fd)
            report = ""
        if isinstance(err, Exception):
            raise ClusterError(f"the cluster did not start: {err}\n{report}") from err
        raise
    return cluster


def _yaml_stream(objects: Iterable[dict[str, Any]]) -> str:
    return "".join(f"---\n{json.dumps(obj)}\n" for obj in objects)


def _start_node(cluster: Cluster, timeout: float) -> None:
    paths, net = cluster.paths, cluster.net
    for directory in (paths.root, paths.cni_conf_dir, paths.cni_ipam_dir, paths.kubelet_root / "manifests",
                      paths.pod_logs, paths.containerd_root):
        directory.mkdir(parents=True, exist_ok=True)
    paths.containerd_config.write_text(nodeconfig.containerd_toml(paths, binaries.require("containerd-shim-runc-v2")))
    for registry in nodeconfig.BLOCKED_REGISTRIES:
        hosts = paths.registry_hosts / registry / "hosts.toml"
        hosts.parent.mkdir(parents=True, exist_ok=True)
        hosts.write_text(nodeconfig.registry_hosts_toml(registry))
    (paths.cni_conf_dir / "10-pko.conflist").write_text(nodeconfig.cni_conflist(paths, net.bridge, net.pod_cidr))
    paths.kubelet_config.write_text(nodeconfig.kubelet_config(paths, net.dns_service_ip))
    paths.kube_proxy_config.write_text(nodeconfig.kube_proxy_config(cluster.kubeconfig, net.pod_cidr))
    kubeconfig = str(cluster.kubeconfig)
    logs = cluster.log_dir

    cluster._processes.append(controlplane.launch("kube-scheduler", [
        str(binaries.require("kube-scheduler")), f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={ports.free_port()}",
    ], logs))
    containerd = controlplane.launch("containerd", [str(binaries.require("containerd")), "--config",
                                                    str(paths.containerd_config)], logs)
    cluster._processes.append(containerd)
    # kubelet exits at once ("server is not initialized yet") if the CRI plugin is not up: wait for it.
    crictl = [str(binaries.require("crictl")), "-r", f"unix://{paths.containerd_socket}", "-t", "5s", "version"]
    _poll(lambda: subprocess.run(crictl, capture_output=True, check=False).returncode == 0, timeout,
          "containerd's CRI", containerd)
    cluster._processes.append(controlplane.launch("kubelet", [
        str(binaries.require("kubelet")), f"--config={paths.kubelet_config}", f"--kubeconfig={kubeconfig}",
        f"--root-dir={paths.kubelet_root}", f"--cert-dir={paths.kubelet_root / 'pki'}",
        f"--node-ip={net.node_ip}", f"--hostname-override={nodeconfig.NODE_NAME}", "-v=1",
    ], logs))
    cluster._processes.append(controlplane.launch("kube-proxy", [
        str(binaries.require("kube-proxy")), f"--config={paths.kube_proxy_config}", "-v=1",
    ], logs))


def _start_storage(cluster: Cluster, helper_image: str) -> None:
    """The default StorageClass and its provisioner (see :func:`nodeconfig.storage_objects`)."""
    binary = binaries.require("local-path-provisioner")
    paths = cluster.paths
    paths.local_volumes.mkdir(parents=True, exist_ok=True)
    config, helper = paths.root / "local-path-config.json", paths.root / "local-path-helper-pod.yaml"
    config.write_text(nodeconfig.local_path_config(paths))
    helper.write_text(nodeconfig.local_path_helper_pod(helper_image))
    cluster.kubectl("apply", "-f", "-", stdin=_yaml_stream(nodeconfig.storage_objects()))
    cluster._processes.append(controlplane.launch("local-path-provisioner", [
        str(binary), "start", f"--kubeconfig={cluster.kubeconfig}", f"--namespace={nodeconfig.STORAGE_NAMESPACE}",
        f"--provisioner-name={nodeconfig.STORAGE_PROVISIONER}", f"--helper-image={helper_image}",
        f"--service-account-name={nodeconfig.STORAGE_HELPER_ACCOUNT}",
        f"--configmap-name={nodeconfig.STORAGE_CONFIGMAP}", f"--config={config}", f"--helper-pod-file={helper}",
    ], cluster.log_dir))


def _poll(test: Any, timeout: float, what: str, process: controlplane.Process | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.popen.poll() is not None:
            raise ClusterError(f"{process.name} exited with {process.popen.returncode}:\n{process.tail()}")
        if test():
            return
        time.sleep(0.2)
    raise ClusterError(f"{what} not ready after {timeout:.0f}s" + (f":\n{process.tail()}" if process else ""))


def _wait_node_ready(cluster: Cluster, timeout: float) -> None:
    kubelet = next(p for p in cluster._processes if p.name == "kubelet")

    def ready() -> bool:
        node = cluster.api_get(f"/api/v1/nodes/{nodeconfig.NODE_NAME}")
        conditions = ((node or {}).get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    _poll(ready, timeout, f"node {nodeconfig.NODE_NAME}", kubelet)


def _wait_deployment(cluster: Cluster, namespace: str, name: str, timeout: float) -> None:
    def available() -> bool:
        deployment = cluster.api_get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}") or {}
        return int((deployment.get("status") or {}).get("availableReplicas") or 0) >= 1

    try:
        _poll(available, timeout, f"deployment {namespace}/{name}")
    except ClusterError as err:
        pods = cluster.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout
        events = cluster.kubectl("get", "events", "-n", namespace, check=False).stdout[-3000:]
        raise ClusterError(f"{err}\n{pods}\n{events}") from None


# --- command line --------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``up DIR [--images a,b]`` (runs until SIGINT/SIGTERM) | ``down`` | ``status DIR`` | ``reap FD`` (internal)."""
    parser = argparse.ArgumentParser(prog="python -m pko.testing.cluster", description=main.__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start the cluster and keep it until SIGINT/SIGTERM")
    up.add_argument("dir", type=Path)
    up.add_argument("--images", default="", help="comma-separated image names to import (default: all built)")
    commands.add_parser("down", help="tear down whatever cluster the state file names")
    status = commands.add_parser("status", help="list what a cluster in DIR left on the machine")
    status.add_argument("dir", type=Path)
    reaper = commands.add_parser("reap")
    reaper.add_argument("fd", type=int)
    args = parser.parse_args(argv)
    if args.command == "reap":
        reap(args.fd)
    elif args.command == "down":
        sweep()
    elif args.command == "status":
        left = leftovers(args.dir.resolve())
        print("\n".join(left) or "clean")
        return 1 if left else 0
    else:
        from pko.testing import images  # the image cache is only needed to start

        names = [n for n in args.images.split(",") if n]
        chosen = [images.built(n) for n in names] if names else list(images.build().values())
        with start(args.dir, images=chosen) as running:
            # blocked only now: the node's processes must not inherit a blocked SIGTERM
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            print(f"KUBECONFIG={running.kubeconfig}", flush=True)
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
    return 0


if __name__ == "__main__":
    sys.exit(main())
