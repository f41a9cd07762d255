"""A real, local Kubernetes control plane: etcd + kube-apiserver (+ kube-controller-manager on request).

Integration tests, end-to-end tests and ``pko dev`` run against this instead of a mock: the API server validates
CRDs, runs CEL rules, serves TokenRequest/TokenReview/SubjectAccessReview and enforces RBAC exactly as a cluster
does. Everything listens on free loopback ports; the data and logs live in one directory so a failed run can be
inspected. There is no kubelet, so Pods are created but stay Pending.
"""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from pko.testing import binaries, nodeconfig, ports

ADMIN_USER = "admin"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


class ControlPlaneError(RuntimeError):
    """The control plane could not be started; the message names the process and quotes its log."""


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]
    argv: list[str] = field(default_factory=list)

    def tail(self, lines: int = 30) -> str:
        self.log_file.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self, timeout: float = 15.0) -> None:
        self.halt(timeout)
        self.log_file.close()

    def halt(self, timeout: float = 15.0) -> None:
        """Stop the process (SIGTERM, then SIGKILL after `timeout`), keeping its log open for a restart."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()

    def relaunch(self) -> None:
        """Start the same command again (same flags, ports and data directory), appending to the same log."""
        if self.popen.poll() is None:
            raise ControlPlaneError(f"{self.name} is still running")
        self.popen = subprocess.Popen(self.argv, stdout=self.log_file, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)


@dataclass
class ControlPlane:
    """A running control plane. Build it with :func:`start`; stop it with :meth:`stop` (or use it as a context)."""

    workdir: Path
    server: str
    admin_token: str
    ca_file: Path
    kubeconfig: Path
    etcd_url: str = ""
    _processes: list[Process] = field(default_factory=list)

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    def logs(self, lines: int = 30) -> str:
        """The last lines of every process log, for a failure report."""
        return "\n".join(f"--- {p.name} ({p.log_path})\n{p.tail(lines)}" for p in self._processes)

    def stop(self) -> None:
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()

    def process(self, name: str) -> Process:
        """The running process `name` (``etcd``, ``kube-apiserver``, ``kube-controller-manager``)."""
        for process in self._processes:
            if process.name == name:
                return process
        raise KeyError(name)

    def restart(self, *names: str, down: Callable[[], None] | None = None, timeout: float = 120.0) -> None:
        """Stop the processes `names` (SIGTERM, as a node reboot or a rolling upgrade would), call `down` while
        they are stopped, then start them again with the same flags, ports and data directory, and wait until
        each answers. The chaos tier uses it to show what clients see across an API server or etcd restart:
        dropped connections and watches, then a store that kept every object (and, for etcd, its revisions)."""
        stopped = [self.process(name) for name in names]
        for process in reversed(stopped):
            process.halt()
        if down is not None:
            down()
        for process in stopped:
            process.relaunch()
            if process.name == "etcd":
                _wait_http_ok(process, f"{self.etcd_url}/health", timeout)
            elif process.name == "kube-apiserver":
                context = ssl.create_default_context(cafile=str(self.ca_file))
                _wait_http_ok(process, f"{self.server}/readyz", timeout, self.admin_token, context)

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ControlPlaneError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def _make_pki(pki: Path, extra_ips: tuple[str, ...] = ()) -> None:
    """A CA, a serving certificate for 127.0.0.1/localhost (plus `extra_ips`: the node's address and the
    `kubernetes` Service's ClusterIP on a real node) and the service-account signing key pair."""
    if (pki / "sa.pub").exists():
        return
    pki.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", "3650", "-subj", "/CN=pko-test-ca", cwd=pki)
    ips = ",".join(f"IP:{ip}" for ip in ("127.0.0.1", "10.0.0.1", *extra_ips))
    (pki / "san.cnf").write_text(
        "[req]\ndistinguished_name=dn\n[dn]\n[ext]\n"
        f"subjectAltName={ips},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n"
        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    )
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=kube-apiserver", cwd=pki)
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.crt", "-days", "3650", "-extfile", "san.cnf", "-extensions", "ext", cwd=pki)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def launch(name: str, argv: list[str], log_dir: Path) -> Process:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    log_file = log_path.open("ab")
    popen = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
    return Process(name, popen, log_path, log_file, list(argv))


def _wait_http_ok(process: Process, url: str, timeout: float, token: str | None = None,
                  context: ssl.SSLContext | None = None) -> None:
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            raise ControlPlaneError(f"{process.name} exited with {process.popen.returncode}:\n{process.tail()}")
        request = urllib.request.Request(url)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=2, context=context) as response:
                if response.status == 200:
                    return
                last = f"HTTP {response.status}"
        except urllib.error.HTTPError as err:
            last = f"HTTP {err.code}"
        except (urllib.error.URLError, OSError) as err:
            last = str(err)
        time.sleep(0.2)
    raise ControlPlaneError(f"{process.name} not ready after {timeout:.0f}s at {url} ({last}):\n{process.tail()}")


def _write_kubeconfig(path: Path, server: str, ca_file: Path, token: str) -> None:
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: pko
  cluster:
    server: {server}
    certificate-authority: {ca_file}
users:
- name: {ADMIN_USER}
  user:
    token: {token}
contexts:
- name: pko
  context:
    cluster: pko
    user: {ADMIN_USER}
    namespace: default
current-context: pko
"""
    )
    path.chmod(0o600)


@dataclass(frozen=True)
class NodeOptions:
    """What a control plane needs to serve a real node (`pko.testing.cluster`) rather than API clients alone:
    reachable at the node's address (pods reach it through the `kubernetes` Service), the ServiceAccount
    admission plugin (pods get their token volumes), Node authorisation, a Service range of its own, and the
    feature gates the node turns on (:data:`pko.testing.nodeconfig.FEATURE_GATES`)."""

    address: str
    service_cidr: str
    kubernetes_service_ip: str
    #: Where the API server writes its audit log (one JSON line per request, metadata only), if anywhere: the
    #: benchmarks count the requests each operator's account makes from it (`bench/`).
    audit_log: Path | None = None

    @property
    def apiserver_flags(self) -> list[str]:
        flags = [
            "--bind-address=0.0.0.0", f"--advertise-address={self.address}",
            f"--service-cluster-ip-range={self.service_cidr}",
            "--authorization-mode=Node,RBAC",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--feature-gates=" + ",".join(f"{gate}=true" for gate in nodeconfig.FEATURE_GATES),
        ]
        if self.audit_log is not None:
            flags += audit_flags(self.audit_log)
        return flags


def audit_flags(audit_log: Path) -> list[str]:
    """kube-apiserver's flags to write the audit log (:data:`AUDIT_POLICY`) to `audit_log`."""
    policy = audit_log.with_name("audit-policy.yaml")
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text(AUDIT_POLICY)
    return [f"--audit-policy-file={policy}", f"--audit-log-path={audit_log}",
            "--audit-log-format=json", "--audit-log-maxsize=500", "--audit-log-maxbackup=1"]


#: Metadata of every request, once (at its end; a watch at its start), nothing of bodies: enough to count requests
#: per user without secrets in the log.
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
"""


_LOOPBACK_FLAGS = [
    "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
    "--service-cluster-ip-range=10.0.0.0/24",
    "--authorization-mode=RBAC",
    "--disable-admission-plugins=ServiceAccount",
]


def start(workdir: Path, *, controller_manager: bool = False, timeout: float = 120.0,
          node: NodeOptions | None = None, audit_log: Path | None = None) -> ControlPlane:
    """Start etcd and kube-apiserver (and kube-controller-manager) with their state under `workdir`.

    A `workdir` that already holds data is reused (``pko dev`` keeps its cluster between runs). With `node`, the
    API server is set up for a real kubelet (see :class:`NodeOptions`) and kube-controller-manager always runs.
    With `audit_log` (loopback only; a node has its own in :class:`NodeOptions`), the API server writes the metadata
    of every request there.
    """
    workdir = workdir.resolve()
    pki = workdir / "pki"
    _make_pki(pki, (node.address, node.kubernetes_service_ip) if node else ())
    controller_manager = controller_manager or node is not None
    token_file = workdir / "tokens.csv"
    if not token_file.exists():
        token_file.write_text(f'{os.urandom(16).hex()},{ADMIN_USER},admin-uid,"system:masters"\n')
        token_file.chmod(0o600)
    admin_token = token_file.read_text().split(",", 1)[0]
    log_dir = workdir / "logs"
    cp = ControlPlane(workdir, "", admin_token, pki / "ca.crt", workdir / "kubeconfig")
    try:
        etcd_port, peer_port, api_port = ports.free_port(), ports.free_port(), ports.free_port()
        etcd = launch("etcd", [
            str(binaries.require("etcd")), "--data-dir", str(workdir / "etcd"), "--name", "pko",
            "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"pko=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync", "--log-level", "warn",
        ], log_dir)
        cp._processes.append(etcd)
        cp.etcd_url = f"http://127.0.0.1:{etcd_port}"
        _wait_http_ok(etcd, f"{cp.etcd_url}/health", timeout)

        cp.server = f"https://127.0.0.1:{api_port}"
        apiserver = launch("kube-apiserver", [
            str(binaries.require("kube-apiserver")),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            f"--secure-port={api_port}",
            *(node.apiserver_flags if node else [*_LOOPBACK_FLAGS, *(audit_flags(audit_log) if audit_log else [])]),
            f"--cert-dir={workdir / 'certs'}",
            f"--tls-cert-file={pki / 'server.crt'}", f"--tls-private-key-file={pki / 'server.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--token-auth-file={token_file}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--allow-privileged=true",
            "--enable-priority-and-fairness=false",
            "--profiling=false",
        ], log_dir)
        cp._processes.append(apiserver)
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        _wait_http_ok(apiserver, f"{cp.server}/readyz", timeout, admin_token, context)
        _write_kubeconfig(cp.kubeconfig, cp.server, cp.ca_file, admin_token)

        if controller_manager:
            kcm = launch("kube-controller-manager", [
                str(binaries.require("kube-controller-manager")),
                f"--kubeconfig={cp.kubeconfig}",
                f"--authentication-kubeconfig={cp.kubeconfig}",
                f"--authorization-kubeconfig={cp.kubeconfig}",
                "--leader-elect=false", "--bind-address=127.0.0.1",
                f"--secure-port={ports.free_port()}",
                f"--cert-dir={workdir / 'kcm-certs'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=false",
                # a real node needs the node lifecycle controller: it lifts the not-ready taint once kubelet is Ready
                "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller"
                + ("" if node else ",-nodelifecycle"),
            ], log_dir)
            cp._processes.append(kcm)
            _wait_controller_manager(kcm, timeout)
    except BaseException:
        cp.stop()
        raise
    return cp


def _wait_controller_manager(process: Process, timeout: float) -> None:
    """KCM has no anonymous health endpoint here; wait until it logs that its controllers started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            raise ControlPlaneError(f"kube-controller-manager exited:\n{process.tail()}")
        if "Started controller" in process.tail(400) or "Started \"" in process.tail(400):
            return
        time.sleep(0.3)
    raise ControlPlaneError(f"kube-controller-manager did not start its controllers:\n{process.tail()}")
