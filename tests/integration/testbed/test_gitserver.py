"""The test git server: dulwich's smart HTTP with per-repository basic auth (real git as the client), pushes
refused, and the listening address limited to loopback or an address of this machine; the same over HTTPS with a
throw-away CA that git, go-git (the Go reference agent) and pko's own git fetch trust only when told to."""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from pko.sources import git
from pko.testing import binaries, gitserver, hostnet, testca

CLEAN_ENV = {"PATH": "/usr/bin:/bin", "GIT_TERMINAL_PROMPT": "0", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"}


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, env=CLEAN_ENV, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[gitserver.GitServer]:
    with gitserver.running(tmp_path_factory.mktemp("git"), tls=True) as running:
        yield running


def test_git_clones_over_http_with_protocol_v2_requested(server: gitserver.GitServer, tmp_path: Path) -> None:
    head = server.create_repo("open", {"README": "hello\n"})
    cloned = _git("-c", "protocol.version=2", "clone", "--quiet", "--depth", "1", server.http_url("open"),
                  str(tmp_path / "c"))
    assert cloned.returncode == 0, cloned.stderr
    assert _git("rev-parse", "HEAD", cwd=tmp_path / "c").stdout.strip() == head
    pushed = _git("push", server.http_url("open"), "HEAD:refs/heads/other", cwd=tmp_path / "c")
    assert pushed.returncode != 0
    assert "403" in pushed.stderr


def test_a_protected_repository_needs_its_credentials(server: gitserver.GitServer, tmp_path: Path) -> None:
    head = server.create_repo("secret", {"README": "psst\n"})
    server.protect("secret", "alice", "s3cret")
    anonymous = _git("ls-remote", server.http_url("secret"))
    assert anonymous.returncode != 0
    wrong = _git("ls-remote", server.http_url("secret").replace("http://", "http://alice:nope@"))
    assert wrong.returncode != 0
    right = _git("ls-remote", server.http_url("secret").replace("http://", "http://alice:s3cret@"))
    assert right.returncode == 0, right.stderr
    assert right.stdout.split()[0] == head
    assert git.checkout(server.http_url("secret"), "main", tmp_path / "d",
                        auth=git.GitAuth(username="alice", password="s3cret")) == head


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "203.0.113.7", "localhost", "example.invalid"])
def test_other_addresses_are_refused(host: str, tmp_path: Path) -> None:
    with pytest.raises(gitserver.GitServerError, match=r"refusing to serve git|IP address"):
        gitserver.start(tmp_path, host=host)


def test_serves_on_an_address_of_this_machine(tmp_path: Path) -> None:
    own = sorted(a for a in hostnet.local_addresses()
                 if ipaddress.ip_address(a).version == 4 and not ipaddress.ip_address(a).is_loopback)
    host = own[0] if own else "127.0.0.1"
    with gitserver.running(tmp_path / "srv", host=host, tls=True) as server:
        head = server.create_repo("r", {"a": "1\n"})
        assert server.http_url("r").startswith(f"http://{host}:")
        assert server.git_url("r").startswith(f"git://{host}:")
        assert server.https_url("r").startswith(f"https://{host}:")
        assert git.checkout(server.http_url("r"), "main", tmp_path / "h") == head
        assert git.checkout(server.git_url("r"), "main", tmp_path / "g") == head
        listed = subprocess.run(["git", "ls-remote", server.https_url("r")], capture_output=True, text=True,
                                env={**CLEAN_ENV, "GIT_SSL_CAINFO": str(server.ca_path)}, check=False)
        assert listed.returncode == 0, listed.stderr  # the certificate names this address
        assert listed.stdout.split()[0] == head


def test_go_git_clones_without_side_band(server: gitserver.GitServer, tmp_path: Path) -> None:
    """The Go reference agent clones with go-git, which asks for no side-band: the pack must end where git's does
    (dulwich once appended a flush-pkt, which go-git read as the pack's checksum)."""
    head = server.create_repo("for-go", {"Pulumi.yaml": "name: p\nruntime: yaml\n"})
    done = subprocess.run([str(binaries.require("pko-go-agent")), "init", "-t", str(tmp_path / "src"),
                           "--git-url", server.http_url("for-go"), "--git-revision", head],
                          env=CLEAN_ENV, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "src" / "Pulumi.yaml").read_text() == "name: p\nruntime: yaml\n"


# --- HTTPS ---------------------------------------------------------------------------------------------------------


def test_git_clones_over_https_only_when_it_trusts_the_ca(server: gitserver.GitServer, tmp_path: Path) -> None:
    head = server.create_repo("tls-open", {"README": "hello\n"})
    url = server.https_url("tls-open")
    assert url == f"https://127.0.0.1:{server.https_port}/tls-open.git"
    assert server.ca_pem.startswith("-----BEGIN CERTIFICATE-----")
    untrusted = _git("clone", "--quiet", url, str(tmp_path / "u"))  # Debian's CA bundle does not know our CA
    assert untrusted.returncode != 0
    assert "certificate" in untrusted.stderr, untrusted.stderr
    trusted = subprocess.run(["git", "clone", "--quiet", url, str(tmp_path / "t")], capture_output=True, text=True,
                             env={**CLEAN_ENV, "GIT_SSL_CAINFO": str(server.ca_path)}, check=False)
    assert trusted.returncode == 0, trusted.stderr
    assert _git("rev-parse", "HEAD", cwd=tmp_path / "t").stdout.strip() == head
    assert _git("ls-remote", server.http_url("tls-open")).returncode == 0  # plain HTTP is served as before


def test_a_protected_repository_needs_its_credentials_over_https(server: gitserver.GitServer) -> None:
    head = server.create_repo("tls-secret", {"README": "psst\n"})
    server.protect("tls-secret", "alice", "s3cret")
    env = {**CLEAN_ENV, "GIT_SSL_CAINFO": str(server.ca_path)}
    url = server.https_url("tls-secret")

    def ls_remote(remote: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "ls-remote", remote], env=env, capture_output=True, text=True, check=False)

    assert ls_remote(url).returncode != 0
    assert ls_remote(url.replace("https://", "https://alice:nope@")).returncode != 0
    right = ls_remote(url.replace("https://", "https://alice:s3cret@"))
    assert right.returncode == 0, right.stderr
    assert right.stdout.split()[0] == head


def test_the_certificate_names_the_host_in_its_subject_alternative_name(tmp_path: Path) -> None:
    """Go and GnuTLS ignore the common name: the host must be a SAN of the right kind (IP or DNS)."""
    for host, kind, value in (("127.0.0.1", x509.IPAddress, ipaddress.ip_address("127.0.0.1")),
                              ("::1", x509.IPAddress, ipaddress.ip_address("::1")),
                              ("git.example.test", x509.DNSName, "git.example.test")):
        served = testca.issue(tmp_path / host, host)
        cert = x509.load_pem_x509_certificate(served.cert_path.read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert names.get_values_for_type(kind) == [value]  # type: ignore[arg-type]
        ca = x509.load_pem_x509_certificate(served.ca_pem.encode())
        cert.verify_directly_issued_by(ca)
        assert served.key_path.stat().st_mode & 0o077 == 0


def test_a_stalled_or_plain_http_client_does_not_block_https(server: gitserver.GitServer) -> None:
    """Handshakes run in each connection's own thread: a client that never speaks TLS holds up only itself."""
    server.create_repo("tls-busy", {"README": "x\n"})
    env = {**CLEAN_ENV, "GIT_SSL_CAINFO": str(server.ca_path)}
    with socket.create_connection((server.host, server.https_port)) as stalled, \
            socket.create_connection((server.host, server.https_port)) as plain:
        plain.sendall(b"GET /tls-busy.git/info/refs HTTP/1.0\r\n\r\n")
        started = time.monotonic()
        listed = subprocess.run(["git", "ls-remote", server.https_url("tls-busy")], env=env, capture_output=True,
                                text=True, timeout=gitserver.TLS_HANDSHAKE_TIMEOUT, check=False)
        assert listed.returncode == 0, listed.stderr
        assert time.monotonic() - started < gitserver.TLS_HANDSHAKE_TIMEOUT
        assert not _answer(plain).startswith(b"HTTP/")  # no answer in plain HTTP: the connection is dropped
        assert _answer(stalled) == b""  # dropped after the handshake timeout


def _answer(sock: socket.socket) -> bytes:
    """What the server sends before it closes the connection (a reset counts as closing)."""
    sock.settimeout(gitserver.TLS_HANDSHAKE_TIMEOUT + 5)
    received = b""
    try:
        while chunk := sock.recv(1024):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def test_go_git_clones_over_https_with_ssl_cert_file(server: gitserver.GitServer, tmp_path: Path) -> None:
    """The Go reference operator accepts only https and ssh git URLs; its agent (go-git, Go's crypto/x509) trusts
    the CA named by ``SSL_CERT_FILE``, and nothing else when it names our CA."""
    head = server.create_repo("tls-for-go", {"Pulumi.yaml": "name: p\nruntime: yaml\n"})
    server.protect("tls-for-go", "bob", "b0b")
    agent = str(binaries.require("pko-go-agent"))

    def go_init(target: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([agent, "init", "-t", str(target), "--git-url", server.https_url("tls-for-go"),
                               "--git-revision", head], env=env, capture_output=True, text=True, timeout=60,
                              check=False)

    trusted = {**CLEAN_ENV, "SSL_CERT_FILE": str(server.ca_path), "GIT_USERNAME": "bob", "GIT_PASSWORD": "b0b"}
    done = go_init(tmp_path / "src", trusted)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "src" / "Pulumi.yaml").read_text() == "name: p\nruntime: yaml\n"
    untrusted = go_init(tmp_path / "no", {**trusted, "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"})
    assert untrusted.returncode != 0
    assert "certificate" in untrusted.stdout + untrusted.stderr


def test_pko_agent_init_clones_over_https_with_ssl_cert_file(server: gitserver.GitServer, tmp_path: Path) -> None:
    """pko's git fetch (dulwich over urllib3 and OpenSSL) trusts the CA named by ``SSL_CERT_FILE`` — the variable
    the Go agent reads too; git's own ``GIT_SSL_CAINFO`` means nothing to it."""
    head = server.create_repo("tls-for-pko", {"Pulumi.yaml": "name: p\nruntime: yaml\n"})

    def pko_init(target: Path, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pko", "agent", "init", "-t", str(target), "--git-url",
                               server.https_url("tls-for-pko"), "--git-revision", head],
                              env={**CLEAN_ENV, **env}, capture_output=True, text=True, timeout=120, check=False)

    done = pko_init(tmp_path / "src", SSL_CERT_FILE=str(server.ca_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "src" / ".git" / "HEAD").read_text().strip() == head
    for env in ({}, {"GIT_SSL_CAINFO": str(server.ca_path)}):
        refused = pko_init(tmp_path / "no", **env)
        assert refused.returncode != 0
        assert "CERTIFICATE_VERIFY_FAILED" in refused.stdout + refused.stderr, refused.stdout + refused.stderr


def test_nested_repository_names_with_their_credentials(server: gitserver.GitServer, tmp_path: Path) -> None:
    """`owner/name` repositories, as the Go operator requires of a Stack's URL (two path segments at least); a
    protected one asks for its own credentials."""
    head = server.create_repo("org/nested", {"README": "nested\n"})
    server.protect("org/nested", "pko", "nested-secret")
    refused = _git("ls-remote", server.http_url("org/nested"))
    assert refused.returncode != 0
    url = server.http_url("org/nested").replace("http://", "http://pko:nested-secret@")
    listed = _git("ls-remote", url)
    assert listed.returncode == 0, listed.stderr
    assert head in listed.stdout
