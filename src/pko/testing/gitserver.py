"""A real git server on loopback for tests and ``pko dev``: smart HTTP (with optional basic auth), ``git://`` and SSH.

Repositories are bare repositories made and committed to with Debian's ``git``. They are served by ``git
http-backend`` behind a small threaded Python HTTP server (which enforces per-repository basic auth and passes the
``Git-Protocol`` header through, so protocol v2 works), by ``git daemon``, and — when asked — by an ``sshd`` that
accepts only a generated client key. Nothing here imitates git: every byte on the wire comes from git itself.

It listens on 127.0.0.1, or — for pods of the real test cluster — on an address of this machine (`host`), never
anywhere else, and it fails loudly when git or sshd is missing.
"""

from __future__ import annotations

import base64
import contextlib
import getpass
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from pko.testing import hostnet, ports

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


def _exec_path() -> Path:
    return Path(_git("--exec-path"))


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
    """Bare repositories under ``root``, served over HTTP, git:// and (optionally) SSH on loopback."""

    root: Path
    host: str = "127.0.0.1"
    http_port: int = 0
    daemon_port: int = 0
    ssh: SSHServer | None = None
    _credentials: dict[str, tuple[str, str]] = field(default_factory=dict)
    _httpd: ThreadingHTTPServer | None = None
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
        _git("config", "http.receivepack", "false", cwd=bare)
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
        return f"http://{self.host}:{self.http_port}/{name}.git"

    def git_url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.daemon_port}/{name}.git"

    def ssh_url(self, name: str) -> str:
        if self.ssh is None:
            raise GitServerError("the git server was started without SSH")
        return f"ssh://{self.ssh.user}@127.0.0.1:{self.ssh.port}{self.repos / f'{name}.git'}"

    # --- lifecycle --------------------------------------------------------------------------------------------

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
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


def _handler(server: GitServer) -> type[BaseHTTPRequestHandler]:
    backend = str(_exec_path() / "git-http-backend")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
            pass

        def _authorized(self, repo: str) -> bool:
            expected = server._credentials.get(repo)
            if expected is None:
                return True
            header = self.headers.get("Authorization", "")
            if not header.lower().startswith("basic "):
                return False
            try:
                user, _, password = base64.b64decode(header[6:]).decode().partition(":")
            except ValueError:
                return False
            return (user, password) == expected

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks: list[bytes] = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        self.rfile.readline()
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _serve(self) -> None:
            path, _, query = self.path.partition("?")
            repo = path.lstrip("/").split("/", 1)[0].removesuffix(".git")
            body = self._body() if self.command == "POST" else b""
            if not self._authorized(repo):
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="pko-test"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            env = {
                "PATH": os.environ.get("PATH", ""), "GIT_PROJECT_ROOT": str(server.repos),
                "GIT_HTTP_EXPORT_ALL": "1", "REQUEST_METHOD": self.command, "PATH_INFO": path,
                "QUERY_STRING": query, "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": self.client_address[0],
                "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent",
            }
            if self.headers.get("Git-Protocol"):
                env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
            if self.headers.get("Content-Encoding"):
                env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
            if repo in server._credentials:
                env["REMOTE_USER"] = server._credentials[repo][0]
            result = subprocess.run([backend], input=body, env=env, capture_output=True, check=False)
            out = result.stdout
            crlf, lf = out.find(b"\r\n\r\n"), out.find(b"\n\n")
            separator = b"\r\n\r\n" if crlf >= 0 and (lf < 0 or crlf < lf) else b"\n\n"
            head, _, payload = out.partition(separator)
            status = 200
            headers = []
            for line in head.decode(errors="replace").splitlines():
                key, _, value = line.partition(":")
                if key.lower() == "status":
                    status = int(value.strip().split()[0])
                elif key:
                    headers.append((key.strip(), value.strip()))
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = _serve
        do_POST = _serve

    return Handler


def _start_ssh(workdir: Path, repos: Path) -> SSHServer:
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
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {ssh_dir / 'authorized_keys'}\nPidFile {ssh_dir / 'sshd.pid'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
        "UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\nAcceptEnv GIT_PROTOCOL\n"
        f"SetEnv PATH={os.environ.get('PATH', '/usr/bin:/bin')}\n"
    )
    log_path = ssh_dir / "sshd.log"
    process = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stdout=log_path.open("ab"),
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    _wait_port(port, process, log_path)
    return SSHServer(port, getpass.getuser(), client_key.read_text(), client_key, process, log_path)


def _wait_port(port: int, process: subprocess.Popen[bytes], log_path: Path, timeout: float = 20.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise GitServerError(f"server exited with {process.returncode}: {log_path.read_text()[-2000:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise GitServerError(f"nothing listening on port {port} after {timeout}s: {log_path.read_text()[-2000:]}")


def start(workdir: Path, *, ssh: bool = False, host: str = "127.0.0.1") -> GitServer:
    """Start the HTTP and git:// servers (and sshd when `ssh`) for repositories under `workdir`; the HTTP server
    listens on `host` (loopback, or an address of this machine so that pods reach it)."""
    if host != "127.0.0.1" and host not in hostnet.local_addresses():
        raise GitServerError(f"{host} is not an address of this machine: the git server listens only here")
    server = GitServer(workdir, host=host)
    server.repos.mkdir(parents=True, exist_ok=True)
    try:
        httpd = ThreadingHTTPServer((host, 0), _handler(server))
        httpd.daemon_threads = True
        server._httpd = httpd
        server.http_port = httpd.server_address[1]
        threading.Thread(target=httpd.serve_forever, name="pko-git-http", daemon=True).start()

        server.daemon_port = ports.free_port()
        log_path = workdir / "git-daemon.log"
        server._daemon = subprocess.Popen(
            ["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={server.repos}", "--listen=127.0.0.1",
             f"--port={server.daemon_port}", "--enable=upload-pack", str(server.repos)],
            stdout=log_path.open("ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **GIT_ENV},
        )
        _wait_port(server.daemon_port, server._daemon, log_path)
        if ssh:
            server.ssh = _start_ssh(workdir, server.repos)
    except BaseException:
        server.stop()
        raise
    return server


@contextlib.contextmanager
def running(workdir: Path, *, ssh: bool = False, host: str = "127.0.0.1") -> Iterator[GitServer]:
    server = start(workdir, ssh=ssh, host=host)
    try:
        yield server
    finally:
        server.stop()
