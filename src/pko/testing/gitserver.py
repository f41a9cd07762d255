"""A real git server for tests and ``pko dev``: smart HTTP(S) (with optional basic auth), ``git://`` and SSH.

Repositories are bare repositories made and committed to with Debian's ``git``. They are served over HTTP by
dulwich's WSGI git server (:mod:`dulwich.web`) behind per-repository basic auth, by ``git daemon``, and — when
asked — by an ``sshd`` that accepts only a generated client key. Nothing here imitates git: every byte on the wire
comes from git or dulwich. Over HTTP the protocol is v0 (a v2 request falls back to it, as git clients expect), and
only advertised commits can be fetched by id (``allow_any_sha`` applies to ``git://`` and SSH, which run git's
own ``upload-pack``); pushes are refused.

When asked (``tls=True``), the same WSGI app with the same basic auth is also served over HTTPS, because the Go
reference operator accepts only ``https`` and ``ssh`` git URLs for a Stack. Each server makes its own throw-away CA
(:mod:`pko.testing.testca`); clients trust it through ``ca_path`` and their usual environment variables
(``GIT_SSL_CAINFO`` for git, ``SSL_CERT_FILE`` for Go and for pko's dulwich/OpenSSL fetch), never by turning
verification off.

Everything listens on ``host``: loopback by default, or an address of this machine (so pods of a test cluster can
reach the same repositories). It must never listen on any other address, and it fails loudly when git or sshd is
missing.
"""

from __future__ import annotations

import base64
import contextlib
import getpass
import ipaddress
import os
import shutil
import signal
import socket
import socketserver
import ssl
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from dulwich import protocol as git_protocol
from dulwich import server as git_server
from dulwich import web as git_web

from pko.testing import hostnet, ports, testca

LOOPBACK = "127.0.0.1"

#: How long a client may take to finish its TLS handshake before its connection is dropped.
TLS_HANDSHAKE_TIMEOUT = 10.0

GIT_ENV = {
    "GIT_AUTHOR_NAME": "pko test", "GIT_AUTHOR_EMAIL": "test@pko.invalid",
    "GIT_COMMITTER_NAME": "pko test", "GIT_COMMITTER_EMAIL": "test@pko.invalid",
    "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent",
}


class GitServerError(RuntimeError):
    """The git server could not be set up (a missing binary, a failing git command)."""


def _git(*args: str, cwd: Path | None = None) -> str:
    git = shutil.which("git")
    if git is None:
        raise GitServerError("git is not installed: the git server fixture needs Debian's git")
    env = {**os.environ, **GIT_ENV}
    result = subprocess.run([git, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise GitServerError(f"git {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout.strip()


def check_host(host: str) -> str:
    """`host` if it is a loopback address or one of this machine's; GitServerError for anything else."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise GitServerError(f"the git server listens on an IP address, not {host!r}") from None
    if address.is_loopback:
        return host
    own = hostnet.local_addresses()
    if address.is_unspecified or str(address) not in own:
        raise GitServerError(f"refusing to serve git on {host}: only loopback or an address of this machine "
                             f"({', '.join(sorted(own))}) is allowed")
    return host


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@dataclass
class SSHServer:
    port: int
    user: str
    private_key: str
    private_key_path: Path
    process: subprocess.Popen[bytes]
    log_path: Path


@dataclass
class GitServer:
    """Bare repositories under ``root``, served over HTTP, git:// and (optionally) HTTPS and SSH on ``host``."""

    root: Path
    host: str = LOOPBACK
    http_port: int = 0
    daemon_port: int = 0
    https_port: int = 0
    ssh: SSHServer | None = None
    tls: testca.ServingCertificate | None = None
    _credentials: dict[str, tuple[str, str]] = field(default_factory=dict)
    _httpd: WSGIServer | None = None
    _httpsd: WSGIServer | None = None
    _daemon: subprocess.Popen[bytes] | None = None

    @property
    def repos(self) -> Path:
        return self.root / "repos"

    # --- repositories -----------------------------------------------------------------------------------------

    def create_repo(self, name: str, files: Mapping[str, str | bytes], branch: str = "main",
                    message: str = "initial commit", allow_any_sha: bool = True) -> str:
        """A new bare repository `name` with one commit of `files` on `branch`; returns the commit SHA."""
        bare = self.repos / f"{name}.git"
        _git("init", "--bare", "--initial-branch", branch, str(bare))
        if allow_any_sha:
            _git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=bare)
        return self.commit(name, files, branch=branch, message=message)

    def commit(self, name: str, files: Mapping[str, str | bytes], branch: str = "main",
               message: str = "update", delete: tuple[str, ...] = (), base: str | None = None) -> str:
        """Commit `files` (path → content) on top of `branch` of repository `name`; returns the new SHA.

        A branch that does not exist yet starts from branch `base`, or with no history when `base` is None.
        """
        bare = self.repos / f"{name}.git"
        work = self.root / "work" / name
        if not work.exists():
            _git("clone", "--quiet", str(bare), str(work))
        _git("fetch", "--quiet", "origin", cwd=work)
        has_branch = bool(_git("ls-remote", "--heads", "origin", branch, cwd=work))
        if has_branch or base is not None:
            _git("checkout", "--quiet", "-B", branch, f"origin/{branch if has_branch else base}", cwd=work)
        else:
            _git("checkout", "--quiet", "--orphan", branch, cwd=work)
            _git("rm", "-rf", "--quiet", "--ignore-unmatch", ".", cwd=work)
        for path in delete:
            _git("rm", "--quiet", path, cwd=work)
        for path, content in files.items():
            target = work / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content)
        _git("add", "-A", cwd=work)
        _git("commit", "--quiet", "--allow-empty", "-m", message, cwd=work)
        _git("push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", cwd=work)
        return _git("rev-parse", "HEAD", cwd=work)

    def tag(self, name: str, tag: str, revision: str) -> None:
        _git("tag", tag, revision, cwd=self.repos / f"{name}.git")

    def protect(self, name: str, username: str, password: str) -> None:
        """Require HTTP basic auth with these credentials for repository `name`."""
        self._credentials[name] = (username, password)

    def http_url(self, name: str) -> str:
        return f"http://{_url_host(self.host)}:{self.http_port}/{name}.git"

    def https_url(self, name: str) -> str:
        """The HTTPS URL of repository `name`; its certificate is signed by the CA at ``ca_path``."""
        if self.tls is None:
            raise GitServerError("the git server was started without TLS")
        return f"https://{_url_host(self.host)}:{self.https_port}/{name}.git"

    @property
    def ca_path(self) -> Path:
        """The PEM file of the CA that signed the HTTPS certificate: what ``GIT_SSL_CAINFO`` or ``SSL_CERT_FILE``
        should name for a client to trust this server (and only it: the file holds no public CA)."""
        if self.tls is None:
            raise GitServerError("the git server was started without TLS")
        return self.tls.ca_path

    @property
    def ca_pem(self) -> str:
        """The CA certificate in PEM, e.g. for a Secret or ConfigMap mounted into a pod."""
        return self.ca_path.read_text()

    def git_url(self, name: str) -> str:
        return f"git://{_url_host(self.host)}:{self.daemon_port}/{name}.git"

    def ssh_url(self, name: str) -> str:
        if self.ssh is None:
            raise GitServerError("the git server was started without SSH")
        return f"ssh://{self.ssh.user}@{_url_host(self.host)}:{self.ssh.port}{self.repos / f'{name}.git'}"

    def authorize_new_key(self, directory: Path, passphrase: str = "") -> str:
        """A new ed25519 key (protected by `passphrase` if given), made by the real ``ssh-keygen`` as a user makes
        one and authorised on this server's sshd; its private key, in OpenSSH's format."""
        if self.ssh is None:
            raise GitServerError("the git server was started without SSH")
        key = directory / "stack_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", str(key)], check=True)
        authorized = self.ssh.private_key_path.parent / "authorized_keys"
        authorized.write_text(authorized.read_text() + key.with_suffix(".pub").read_text())
        return key.read_text()

    def authorized(self, repo: str, authorization: str) -> bool:
        """Whether an ``Authorization`` header value lets a client read repository `repo`."""
        expected = self._credentials.get(repo)
        if expected is None:
            return True
        if not authorization.lower().startswith("basic "):
            return False
        try:
            user, _, password = base64.b64decode(authorization[6:]).decode().partition(":")
        except ValueError:
            return False
        return (user, password) == expected

    # --- lifecycle --------------------------------------------------------------------------------------------

    def stop(self) -> None:
        for httpd in (self._httpd, self._httpsd):
            if httpd is not None:
                httpd.shutdown()
                httpd.server_close()
        self._httpd = self._httpsd = None
        for proc in (self._daemon, self.ssh.process if self.ssh else None):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self._daemon = None

    def __enter__(self) -> GitServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _ThreadingWSGIServer6(_ThreadingWSGIServer):
    address_family = socket.AF_INET6


class _TLSWSGIServer(_ThreadingWSGIServer):
    """A threading WSGI server speaking TLS: the listening socket stays plain and each accepted connection is wrapped in
    its own request thread, so a client that is slow to handshake (or never does) holds up only itself — wrapping the
    listening socket would run every handshake in the accept loop. A failed handshake (an untrusted certificate, a
    plain HTTP request) just drops that connection. After the response the server says ``close_notify``, so clients
    that read the body to the end of the connection (HTTP/1.0) see a clean end, not a truncation."""

    ssl_context: ssl.SSLContext

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(TLS_HANDSHAKE_TIMEOUT)
        try:
            tls = self.ssl_context.wrap_socket(request, server_side=True)
        except (OSError, ValueError):  # ssl.SSLError and timeouts are OSErrors
            return
        with tls:
            tls.settimeout(None)  # as on plain HTTP: the request itself has no deadline
            super().finish_request(tls, client_address)
            tls.settimeout(TLS_HANDSHAKE_TIMEOUT)
            with contextlib.suppress(OSError, ValueError):
                tls.unwrap()

    def setup_environ(self) -> None:
        super().setup_environ()
        self.base_environ["HTTPS"] = "on"  # so wsgi.url_scheme is https


class _TLSWSGIServer6(_TLSWSGIServer):
    address_family = socket.AF_INET6


class _QuietHandler(git_web.WSGIRequestHandlerLogger):
    """Errors (a refused want) go to dulwich's logger, not stderr; one line per request goes nowhere."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Repositories(git_server.FileSystemBackend):
    """The repositories under a root, named by URL path (``/name.git``); nothing outside it."""

    def open_repository(self, path: str | bytes) -> Any:
        return super().open_repository(os.fsdecode(path).lstrip("/"))


class _UploadPack(git_server.UploadPackHandler):
    """upload-pack that, like git's, requires no capability of the client: go-git (Flux's source-controller, the
    reference agent) does not offer ``thin-pack``, which dulwich would otherwise insist on. dulwich sends whole
    objects, so a client without thin packs, side-band or ofs-delta gets a pack it can read.

    dulwich also ends every pack with a flush-pkt. git sends one only inside side-band; without side-band (go-git
    as the Go agent clones) those four bytes `0000` follow the pack and go-git takes them for the pack's checksum
    ("pack footer hash … does not match"). So without side-band, nothing follows the pack."""

    @classmethod
    def required_capabilities(cls) -> tuple[bytes, ...]:
        return ()

    def _start_pack_send_phase(self) -> None:
        super()._start_pack_send_phase()
        if self.has_capability(git_protocol.CAPABILITY_SIDE_BAND_64K):
            return
        write_pkt_line = self.proto.write_pkt_line

        def no_flush(line: bytes | None) -> None:
            if line is not None:
                write_pkt_line(line)

        self.proto.write_pkt_line = no_flush  # type: ignore[method-assign]


def _http_app(server: GitServer) -> WSGIApplication:
    """dulwich's smart HTTP git server (upload-pack only) behind per-repository basic auth."""
    backend = _Repositories(str(server.repos))
    handlers: dict[bytes, Any] = {
        b"git-upload-pack": _UploadPack,
        b"git-receive-pack": None, b"git-upload-archive": None,  # refused: "Unsupported service"
    }
    git = git_web.make_wsgi_chain(backend, handlers=handlers)

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        # the repository's name is the path up to `.git`: `org/name.git/info/refs` is repository `org/name`
        repo = environ.get("PATH_INFO", "").lstrip("/").partition(".git")[0]
        if not server.authorized(repo, environ.get("HTTP_AUTHORIZATION", "")):
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="pko-test"'),
                                                 ("Content-Length", "0")])
            return [b""]
        return git(environ, start_response)

    return app


def _start_ssh(workdir: Path, repos: Path, host: str) -> SSHServer:
    sshd = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else None)
    keygen = shutil.which("ssh-keygen")
    if sshd is None or keygen is None:
        raise GitServerError("sshd/ssh-keygen not found: install openssh-server for the SSH git server")
    ssh_dir = workdir / "ssh"
    ssh_dir.mkdir(parents=True, exist_ok=True)
    host_key, client_key = ssh_dir / "host_ed25519", ssh_dir / "client_ed25519"
    for key in (host_key, client_key):
        if not key.exists():
            subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (ssh_dir / "authorized_keys").write_text(client_key.with_suffix(".pub").read_text())
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege-separation directory
    port = ports.free_port()
    config = ssh_dir / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress {host}\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {ssh_dir / 'authorized_keys'}\nPidFile {ssh_dir / 'sshd.pid'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
        "UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\nAcceptEnv GIT_PROTOCOL\n"
        f"SetEnv PATH={os.environ.get('PATH', '/usr/bin:/bin')}\n"
    )
    log_path = ssh_dir / "sshd.log"
    process = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stdout=log_path.open("ab"),
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    _wait_port(host, port, process, log_path)
    return SSHServer(port, getpass.getuser(), client_key.read_text(), client_key, process, log_path)


def _wait_port(host: str, port: int, process: subprocess.Popen[bytes], log_path: Path,
               timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise GitServerError(f"server exited with {process.returncode}: {log_path.read_text()[-2000:]}")
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
            if sock.connect_ex((host, port)) == 0:
                return
        time.sleep(0.1)
    raise GitServerError(f"nothing listening on port {port} after {timeout}s: {log_path.read_text()[-2000:]}")


def _serve_https(server: GitServer, app: WSGIApplication) -> None:
    """The same WSGI app (same basic auth) over TLS, with a new CA and certificate for the server's host."""
    server.tls = testca.issue(server.root / "tls", server.host)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(server.tls.cert_path, server.tls.key_path)
    server_class: type[_TLSWSGIServer] = _TLSWSGIServer6 if ":" in server.host else _TLSWSGIServer
    httpsd = make_server(server.host, 0, app, server_class=server_class, handler_class=_QuietHandler)
    httpsd.ssl_context = context
    server._httpsd = httpsd
    server.https_port = httpsd.server_address[1]
    threading.Thread(target=httpsd.serve_forever, name="pko-git-https", daemon=True).start()


def start(workdir: Path, *, ssh: bool = False, host: str = LOOPBACK, tls: bool = False) -> GitServer:
    """Start the HTTP and git:// servers (and sshd when `ssh`, HTTPS when `tls`) on `host` for repositories
    under `workdir`."""
    server = GitServer(workdir, check_host(host))
    server.repos.mkdir(parents=True, exist_ok=True)
    try:
        app = _http_app(server)
        server_class = _ThreadingWSGIServer6 if ":" in host else _ThreadingWSGIServer
        httpd: WSGIServer = make_server(host, 0, app, server_class=server_class, handler_class=_QuietHandler)
        server._httpd = httpd
        server.http_port = httpd.server_address[1]
        threading.Thread(target=httpd.serve_forever, name="pko-git-http", daemon=True).start()
        if tls:
            _serve_https(server, app)

        server.daemon_port = ports.free_port()
        log_path = workdir / "git-daemon.log"
        server._daemon = subprocess.Popen(
            ["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={server.repos}", f"--listen={host}",
             f"--port={server.daemon_port}", "--enable=upload-pack", str(server.repos)],
            stdout=log_path.open("ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **GIT_ENV},
        )
        _wait_port(host, server.daemon_port, server._daemon, log_path)
        if ssh:
            server.ssh = _start_ssh(workdir, server.repos, host)
    except BaseException:
        server.stop()
        raise
    return server


@contextlib.contextmanager
def running(workdir: Path, *, ssh: bool = False, host: str = LOOPBACK, tls: bool = False) -> Iterator[GitServer]:
    server = start(workdir, ssh=ssh, host=host, tls=tls)
    try:
        yield server
    finally:
        server.stop()
