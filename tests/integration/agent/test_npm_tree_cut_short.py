"""A stored npm tree whose answer is cut short is never taken for a whole one: the dependency cache announces the
stored blob's length and digest; a connection that ends early reads as a clean end in the standard library's client,
and an archive cut between two members unpacks without an error. Over a real HTTP connection on loopback."""

from __future__ import annotations

import hashlib
import http.server
import io
import socket
import tarfile
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from pko.agent import nodemodules


def _member(name: str, data: bytes) -> bytes:
    """One regular file as tar blocks (header and padded data)."""
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    return info.tobuf(format=tarfile.GNU_FORMAT) + data + b"\0" * (-len(data) % 512)


def _tree() -> tuple[bytes, int]:
    """A gzipped tree of two packages, and the offset after which the gzip stream holds exactly the first one (a
    full flush there): an answer cut at that byte unpacks the first package and ends as if the archive had."""
    first = _member("node_modules/a/index.js", b"module.exports = 'a'")
    second = _member("node_modules/b/index.js", b"module.exports = 'b'")
    gzip = zlib.compressobj(wbits=31)
    head = gzip.compress(first) + gzip.flush(zlib.Z_FULL_FLUSH)
    return head + gzip.compress(second + b"\0" * 1024) + gzip.flush(), len(head)


class _Answer(http.server.BaseHTTPRequestHandler):
    body = b""
    sent = 0  # bytes of the body actually sent before the connection closes
    digest = ""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/gzip")
        self.send_header("Content-Length", str(len(self.body)))
        self.send_header("X-Content-Sha256", self.digest)
        self.end_headers()
        self.wfile.write(self.body[:self.sent])
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)  # a clean close, as when the operator's pod goes away
        self.close_connection = True

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def cache() -> Iterator[tuple[type[_Answer], str]]:
    handler = type("Answer", (_Answer,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield handler, f"http://127.0.0.1:{server.server_address[1]}/cache/npm-tree"
    finally:
        server.shutdown()
        server.server_close()


def _offer(url: str) -> nodemodules.Offer:
    return nodemodules.Offer(url, b"{}", cast(Any, None))  # the plan is not read by the unpack


def test_a_whole_answer_unpacks(cache: tuple[type[_Answer], str], tmp_path: Path) -> None:
    handler, url = cache
    body, _ = _tree()
    handler.body, handler.sent, handler.digest = body, len(body), hashlib.sha256(body).hexdigest()
    left = tmp_path / f"{nodemodules.STAGING_PREFIX}killed" / "node_modules" / "a"  # an unpack killed midway
    left.mkdir(parents=True)
    (left / "package.json").write_text("{}")
    assert nodemodules.unpack(_offer(url), tmp_path) == len(body)
    assert (tmp_path / "node_modules/b/index.js").read_bytes() == b"module.exports = 'b'"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node_modules"]  # what it left is gone too


def test_an_answer_cut_between_two_packages_is_refused(cache: tuple[type[_Answer], str], tmp_path: Path) -> None:
    handler, url = cache
    body, cut = _tree()
    with tarfile.open(fileobj=io.BytesIO(body[:cut]), mode="r|gz") as short:  # what the cut leaves looks whole
        assert [m.name for m in short] == ["node_modules/a/index.js"]
    handler.body, handler.sent, handler.digest = body, cut, hashlib.sha256(body).hexdigest()
    with pytest.raises(nodemodules.CutShort, match=f"ended after {cut} of {len(body)} bytes"):
        nodemodules.unpack(_offer(url), tmp_path)
    assert not (tmp_path / "node_modules").exists()
    assert not list(tmp_path.glob(".pko-node-modules-*"))


def test_an_answer_that_is_not_the_announced_blob_is_refused(
        cache: tuple[type[_Answer], str], tmp_path: Path) -> None:
    handler, url = cache
    body, _ = _tree()
    handler.body, handler.sent, handler.digest = body, len(body), hashlib.sha256(b"another blob").hexdigest()
    with pytest.raises(nodemodules.CutShort, match="not the blob its digest names"):
        nodemodules.unpack(_offer(url), tmp_path)
    assert not (tmp_path / "node_modules").exists()
