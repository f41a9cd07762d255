"""An oversized repository, or a server streaming a pack without end, is refused at the size cap rather than
filling the disk: real dulwich clients against the real test git server (smart HTTP and ``git://``) and against a
smart-HTTP server on loopback that streams pack data forever.

Each refusal must name the cap and ``GIT_MAX_FETCH_SIZE_BYTES``, and leave nothing in the target a later run could
take for a checkout (an init container restarted after a failed fetch would otherwise report success on a
half-fetched ``.git``); the same repository under a large cap, or none, checks out.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pko.sources import git
from pko.testing import gitserver

CAP = 64 * 1024
BIG = 1024 * 1024
PROJECT = "name: big\nruntime: yaml\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[gitserver.GitServer]:
    with gitserver.running(tmp_path_factory.mktemp("git")) as running:
        yield running


@pytest.fixture(scope="module")
def random_repo(server: gitserver.GitServer) -> tuple[str, str]:
    """A repository holding 1 MiB of incompressible bytes: its pack alone passes the 64 KiB cap."""
    name = f"random-{uuid.uuid4().hex[:6]}"
    return name, server.create_repo(name, {"Pulumi.yaml": PROJECT, "blob.bin": os.urandom(BIG)})


@pytest.fixture(scope="module")
def zeros_repo(server: gitserver.GitServer) -> tuple[str, str]:
    """A repository whose pack is tiny (1 MiB of zeros compresses to about 1 KiB) but whose tree is not."""
    name = f"zeros-{uuid.uuid4().hex[:6]}"
    return name, server.create_repo(name, {"Pulumi.yaml": PROJECT, "zeros.bin": bytes(BIG)})


def _assert_nothing_left(target: Path) -> None:
    assert not (target / ".git").exists()
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("transport", ["http", "git"])
def test_a_pack_past_the_cap_is_refused_and_nothing_is_left(transport: str, server: gitserver.GitServer,
                                                             random_repo: tuple[str, str], tmp_path: Path) -> None:
    name, commit = random_repo
    url = server.http_url(name) if transport == "http" else server.git_url(name)
    target = tmp_path / "out"
    with pytest.raises(git.TooLargeError) as raised:
        git.checkout(url, commit, target, max_size=CAP)
    assert str(raised.value) == (f"{url} sent more than {CAP} bytes of pack data, the size cap "
                                 "(GIT_MAX_FETCH_SIZE_BYTES); the fetch was aborted")
    _assert_nothing_left(target)
    # A second run (a restarted init container) fetches again and fails the same way, not "already checked out".
    with pytest.raises(git.TooLargeError):
        git.checkout(url, "main", target, max_size=CAP)
    _assert_nothing_left(target)


def test_a_tree_past_the_cap_is_refused_before_anything_is_written(server: gitserver.GitServer,
                                                                    zeros_repo: tuple[str, str],
                                                                    tmp_path: Path) -> None:
    name, commit = zeros_repo
    target = tmp_path / "out"
    expected = (rf"^the files of {server.http_url(name)} at {commit[:12]} add up to more than {CAP} bytes, the "
                r"size cap \(GIT_MAX_FETCH_SIZE_BYTES\); nothing was checked out$")
    with pytest.raises(git.TooLargeError, match=expected):
        git.checkout(server.http_url(name), commit, target, max_size=CAP)
    _assert_nothing_left(target)


def test_a_refused_checkout_leaves_an_existing_directory_as_it_was(server: gitserver.GitServer,
                                                                   random_repo: tuple[str, str],
                                                                   tmp_path: Path) -> None:
    name, commit = random_repo
    (tmp_path / "keep.txt").write_text("mine\n")
    with pytest.raises(git.TooLargeError):
        git.checkout(server.http_url(name), commit, tmp_path, max_size=CAP)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


@pytest.mark.parametrize("cap", [4 * BIG, git.UNLIMITED], ids=["4MiB", "unlimited"])
@pytest.mark.parametrize("which", ["random", "zeros"])
def test_the_same_repositories_check_out_under_a_large_cap(cap: int, which: str, server: gitserver.GitServer,
                                                           random_repo: tuple[str, str],
                                                           zeros_repo: tuple[str, str], tmp_path: Path) -> None:
    name, commit = random_repo if which == "random" else zeros_repo
    assert git.checkout(server.http_url(name), commit, tmp_path / "out", max_size=cap) == commit
    big = tmp_path / "out" / ("blob.bin" if which == "random" else "zeros.bin")
    assert big.stat().st_size == BIG
    assert (tmp_path / "out" / "Pulumi.yaml").read_text() == PROJECT


def _pkt(data: bytes) -> bytes:
    return f"{len(data) + 4:04x}".encode() + data


@pytest.fixture
def endless_server() -> Iterator[tuple[str, list[int]]]:
    """A smart-HTTP git server that advertises one branch and then streams pack data until the client hangs up;
    yields its repository URL and the bytes of pack data it managed to send."""
    sent = [0]
    sha = b"1" * 40

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            body = (_pkt(b"# service=git-upload-pack\n") + b"0000"
                    + _pkt(sha + b" HEAD\0side-band-64k ofs-delta\n") + _pkt(sha + b" refs/heads/main\n") + b"0000")
            self.send_response(200)
            self.send_header("Content-Type", "application/x-git-upload-pack-advertisement")
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-git-upload-pack-result")
            self.end_headers()
            chunk = _pkt(b"\x01" + b"PACK" + os.urandom(32 * 1024))
            try:
                self.wfile.write(_pkt(b"NAK\n"))
                while sent[0] < 1024 * BIG:  # 1 GiB: far more than the test could wait for
                    self.wfile.write(chunk)
                    sent[0] += len(chunk)
            except OSError:
                return

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/endless.git", sent
    httpd.shutdown()
    httpd.server_close()


def test_an_endless_pack_is_cut_off_at_the_cap(endless_server: tuple[str, list[int]], tmp_path: Path) -> None:
    url, sent = endless_server
    started = time.monotonic()
    with pytest.raises(git.TooLargeError, match=rf"^{url} sent more than {CAP} bytes of pack data"):
        git.checkout(url, "main", tmp_path / "out", max_size=CAP, timeout=5)
    assert time.monotonic() - started < 30
    assert sent[0] < 64 * BIG, f"the server sent {sent[0]} bytes before the client hung up"
    _assert_nothing_left(tmp_path / "out")
