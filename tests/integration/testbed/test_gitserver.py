"""The test git server: dulwich's smart HTTP with per-repository basic auth (real git as the client), pushes
refused, and the listening address limited to loopback or an address of this machine."""

from __future__ import annotations

import ipaddress
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pko.sources import git
from pko.testing import binaries, gitserver, hostnet

CLEAN_ENV = {"PATH": "/usr/bin:/bin", "GIT_TERMINAL_PROMPT": "0", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"}


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, env=CLEAN_ENV, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[gitserver.GitServer]:
    with gitserver.running(tmp_path_factory.mktemp("git")) as running:
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
    with gitserver.running(tmp_path / "srv", host=host) as server:
        head = server.create_repo("r", {"a": "1\n"})
        assert server.http_url("r").startswith(f"http://{host}:")
        assert server.git_url("r").startswith(f"git://{host}:")
        assert git.checkout(server.http_url("r"), "main", tmp_path / "h") == head
        assert git.checkout(server.git_url("r"), "main", tmp_path / "g") == head


def test_go_git_clones_without_side_band(server: gitserver.GitServer, tmp_path: Path) -> None:
    """The Go reference agent clones with go-git, which asks for no side-band: the pack must end where git's does
    (dulwich once appended a flush-pkt, which go-git read as the pack's checksum)."""
    head = server.create_repo("for-go", {"Pulumi.yaml": "name: p\nruntime: yaml\n"})
    done = subprocess.run([str(binaries.require("pko-go-agent")), "init", "-t", str(tmp_path / "src"),
                           "--git-url", server.http_url("for-go"), "--git-revision", head],
                          env=CLEAN_ENV, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "src" / "Pulumi.yaml").read_text() == "name: p\nruntime: yaml\n"
