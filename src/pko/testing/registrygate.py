"""A registry that asks for credentials, as a platform team's private one does: HTTP basic authentication in front of
the test bed's registry (:mod:`pko.testing.ociregistry`, go-containerregistry's, which has none).

Why: a workspace pod pulls a plugin's `image` volume with the pod's `imagePullSecrets` (docs/programs.md), and the
only way to show that a Stack's template carries them to the kubelet is a registry that refuses a pull without them.
Requests without the right ``Authorization`` get 401 and a ``Basic`` challenge (what containerd answers with the
credentials the kubelet hands it); the others are passed on to the registry as they are, the answer streamed back.
The gate counts both, so a test can say that the credentials were asked for and used.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pko.testing import gitserver, ociregistry

#: The answer's headers a client of the registry reads.
_PASSED_HEADERS = ("Content-Type", "Content-Length", "Docker-Content-Digest", "Docker-Distribution-API-Version",
                   "Location")
_CHUNK = 1 << 20


@dataclass
class Gate:
    """The gate's address, the credentials it takes, and what it did."""

    host: str
    port: int
    user: str
    password: str
    refused: int = 0
    passed: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def token(self) -> str:
        """The credentials as basic authentication encodes them."""
        return base64.b64encode(f"{self.user}:{self.password}".encode()).decode()

    def docker_config(self) -> dict[str, object]:
        """The `.dockerconfigjson` of a pull secret for this registry."""
        return {"auths": {self.address: {"auth": self.token}}}

    def count(self, passed: bool) -> None:
        with self._lock:
            if passed:
                self.passed += 1
            else:
                self.refused += 1


@contextlib.contextmanager
def guarding(registry: ociregistry.Registry, user: str, password: str,
             host: str = gitserver.LOOPBACK) -> Iterator[Gate]:
    """A gate on a free port of `host` in front of `registry`, for as long as the block runs."""
    gitserver.check_host(host)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _forward(self, body: bool) -> None:
            if self.headers.get("Authorization") != f"Basic {gate.token}":
                gate.count(False)
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="pko-test"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            gate.count(True)
            upstream = http.client.HTTPConnection(registry.host, registry.port, timeout=60)
            try:
                upstream.request(self.command, self.path, headers={
                    key: value for key, value in self.headers.items() if key.lower() in ("accept", "range")})
                answer = upstream.getresponse()
                length = answer.getheader("Content-Length")
                whole = answer.read() if length is None else b""  # an answer without a length: small, read it
                self.send_response(answer.status)
                for key in _PASSED_HEADERS:
                    if (value := answer.getheader(key)) is not None:
                        self.send_header(key, value)
                if length is None:
                    self.send_header("Content-Length", str(len(whole)))
                self.end_headers()
                if body and length is None:
                    self.wfile.write(whole)
                while body and length is not None and (chunk := answer.read(_CHUNK)):
                    self.wfile.write(chunk)
            finally:
                upstream.close()

        def do_GET(self) -> None:
            self._forward(body=True)

        def do_HEAD(self) -> None:
            self._forward(body=False)

    server = ThreadingHTTPServer((host, 0), Handler)
    server.daemon_threads = True
    gate = Gate(host, server.server_address[1], user, password)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield gate
    finally:
        server.shutdown()
        server.server_close()
