"""A Flux artifact server that streams more than the cap is cut off before the disk fills, with a precise message.

A real HTTP server on loopback serves the bytes; pko.sources.flux downloads them with its real client.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pko.sources import flux

CHUNK = b"\x8b" * 65536


@pytest.fixture
def endless() -> Iterator[str]:
    """Serves /endless: chunked, 64 KiB after 64 KiB, until the client hangs up."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for _ in range(4096):  # 256 MiB at most, so a broken client cannot keep the test running forever
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK))
            except OSError:
                return

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/endless"
    httpd.shutdown()
    httpd.server_close()


def test_download_beyond_twice_the_cap_is_refused(endless: str, tmp_path: Path) -> None:
    target = tmp_path / "out"
    with pytest.raises(flux.FetchError, match=r"bigger than 3145728 bytes \(twice FLUX_MAX_UNTAR_SIZE_BYTES"):
        flux.fetch(endless, "sha256:" + hashlib.sha256(b"").hexdigest(), target, max_size=1024 * 1024)
    assert not target.exists() or list(target.iterdir()) == []


def test_the_cap_follows_the_extraction_cap() -> None:
    assert flux.download_cap(1000) == 2000 + 1024 * 1024
    assert flux.download_cap(-1) == -1
