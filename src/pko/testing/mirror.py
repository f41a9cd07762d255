"""The test bed's package mirror: Pulumi plugins, an npm registry, a PyPI simple index and a Go module proxy.

An air-gapped enterprise points its workspace pods at such mirrors; the test bed does the same, so a real program's
`npm install`, virtualenv, `go build` and plugin download go over the real network path from the pod to this
server at the node's address. What it serves was mirrored at `make tools` time (:mod:`pko.testing.mirrorfill`)
plus the packed plugins `make tools` builds; nothing is fetched from outside the machine while it runs.

It speaks each protocol as its clients expect it, and nothing more:

- ``/plugins/pulumi-resource-<name>-v<version>-<os>-<arch>.tar.gz``: the file name the Pulumi CLI asks a plugin
  server for (``PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES`` or a package's ``pluginDownloadURL`` points here);
- ``/npm/<name>`` a packument of the mirrored versions, whose tarball URLs point back here, and
  ``/npm/<name>/-/<file>.tgz`` (``NPM_CONFIG_REGISTRY``);
- ``/pypi/simple/<project>/`` a PEP 503 page with sha256 fragments, ``/pypi/files/<file>`` (``PIP_INDEX_URL``);
- ``/go/...`` the Go tool's own download-cache layout, which is the GOPROXY protocol (``GOPROXY``).

Every response is counted by part, so a test or the benchmark can say how many plugin bytes a cold start pulled.
It listens only on loopback or an address of this machine (as the git server does).
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import json
import re
import subprocess
import sys
import tempfile
import threading
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pko.testing import binaries, gitserver, mirrorfill

PLUGIN_FILE = re.compile(r"^pulumi-resource-[a-z0-9-]+-v[0-9][^/]*-linux-amd64\.tar\.gz$")


PARTS = (mirrorfill.PART_NPM, mirrorfill.PART_PYPI, mirrorfill.PART_GO)


class MirrorError(RuntimeError):
    """The mirror's cache is missing a part: `make tools` fills it."""


def _normalize(project: str) -> str:
    return re.sub(r"[-_.]+", "-", project).lower()


def _wheel_project(file: str) -> str:
    return _normalize(file.split("-", 1)[0])


@dataclass
class Mirror:
    """A running mirror; ``url`` is what pods use (the node's address)."""

    host: str
    port: int = 0
    plugins: Path = field(default_factory=binaries.bin_dir)
    npm: Path = field(default_factory=lambda: mirrorfill.part_dir(mirrorfill.PART_NPM))
    pypi: Path = field(default_factory=lambda: mirrorfill.part_dir(mirrorfill.PART_PYPI))
    go: Path = field(default_factory=lambda: mirrorfill.part_dir(mirrorfill.PART_GO))
    bytes_served: Counter[str] = field(default_factory=Counter)
    requests: list[tuple[str, str, int]] = field(default_factory=list)  # (part, path, status)
    missing: list[str] = field(default_factory=list)  # parts whose cache is absent (served as 503)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    # --- what pods are told ----------------------------------------------------------------------------------

    def plugin_overrides(self) -> str:
        """``PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES``: Pulumi's own plugins (GitHub, then get.pulumi.com) from here."""
        target = f"{self.url}/plugins"
        return f"^github://api.github.com/pulumi$={target},^https://get.pulumi.com/releases/plugins/?$={target}"

    def env(self) -> dict[str, str]:
        """The environment a workspace pod needs to install everything from this mirror, as users set it."""
        return {
            "PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES": self.plugin_overrides(),
            "NPM_CONFIG_REGISTRY": f"{self.url}/npm/",
            "PIP_INDEX_URL": f"{self.url}/pypi/simple/",
            "PIP_TRUSTED_HOST": self.host,  # plain HTTP inside the cluster: pip ignores such an index otherwise
            "GOPROXY": f"{self.url}/go",
            "GOSUMDB": "off",  # the program's go.sum verifies each module; there is no checksum database inside
            "GOFLAGS": "-mod=mod",
        }

    def served(self, part: str) -> int:
        with self._lock:
            return self.bytes_served[part]

    def fetched(self, part: str) -> list[str]:
        """The paths clients got (status 200) from one part, in order."""
        with self._lock:
            return [path for p, path, status in self.requests if p == part and status == 200]

    # --- serving ---------------------------------------------------------------------------------------------

    def _record(self, part: str, path: str, status: int, size: int) -> None:
        with self._lock:
            self.requests.append((part, path, status))
            self.bytes_served[part] += size

    def resolve(self, path: str) -> tuple[str, int, str, bytes | Path]:
        """(part, status, content type, body) for a GET of `path`; a pure mapping of the URL onto the cache."""
        parts = [urllib.parse.unquote(p) for p in path.split("?", 1)[0].split("/") if p]
        if not parts:
            return "", 404, "text/plain", b"not found\n"
        kind, rest = parts[0], parts[1:]
        if kind == "plugins" and len(rest) == 1 and PLUGIN_FILE.match(rest[0]):
            file = self.plugins / rest[0]
            return kind, *(_file(file, "application/gzip"))
        if kind == "npm":
            return kind, *self._npm(rest)
        if kind == "pypi":
            return kind, *self._pypi(rest)
        if kind == "go":
            return kind, *self._go(rest)
        return kind, 404, "text/plain", b"not found\n"

    def _complete(self, root: Path) -> bool:
        return (root / ".complete").is_file()

    def _npm(self, rest: list[str]) -> tuple[int, str, bytes | Path]:
        if not self._complete(self.npm):
            return 503, "text/plain", b"the npm mirror is not filled: run `make tools`\n"
        if "-" in rest:  # <name...>/-/<file>
            cut = rest.index("-")
            name, file = "/".join(rest[:cut]), "/".join(rest[cut + 1:])
            if "/" in file or ".." in rest:
                return 404, "text/plain", b"not found\n"
            return _file(self.npm / "tarballs" / name / file, "application/octet-stream")
        name = "/".join(rest)
        if ".." in rest or not name:
            return 404, "text/plain", b"not found\n"
        source = self.npm / "packuments" / f"{name}.json"
        if not source.is_file():
            return 404, "application/json", b'{"error":"not found"}'
        versions: dict[str, dict[str, Any]] = json.loads(source.read_text())
        for version, manifest in versions.items():
            manifest["dist"] = {**manifest["dist"],
                                "tarball": f"{self.url}/npm/{name}/-/{mirrorfill.npm_tarball_name(name, version)}"}
        releases = [v for v in versions if "-" not in v] or list(versions)  # `latest` is never a pre-release
        latest = max(releases, key=_semver_key)
        packument = {"name": name, "dist-tags": {"latest": latest}, "versions": versions}
        return 200, "application/json", json.dumps(packument).encode()

    def _pypi(self, rest: list[str]) -> tuple[int, str, bytes | Path]:
        if not self._complete(self.pypi):
            return 503, "text/plain", b"the PyPI mirror is not filled: run `make tools`\n"
        files = self.pypi / "files"
        if rest[:1] == ["files"] and len(rest) == 2 and "/" not in rest[1] and rest[1] not in {".", ".."}:
            return _file(files / rest[1], "application/octet-stream")
        if rest[:1] == ["simple"] and len(rest) <= 2:
            names = sorted(f.name for f in files.iterdir())
            if len(rest) == 1:
                projects = sorted({_wheel_project(n) for n in names})
                links = "".join(f'<a href="{p}/">{p}</a>\n' for p in projects)
                return 200, "text/html", f"<!DOCTYPE html><html><body>\n{links}</body></html>\n".encode()
            wanted = _normalize(rest[1])
            links = "".join(
                f'<a href="../../files/{html.escape(n)}#sha256={_sha256(files / n)}">{html.escape(n)}</a>\n'
                for n in names if _wheel_project(n) == wanted
            )
            if not links:
                return 404, "text/plain", b"not found\n"
            return 200, "text/html", f"<!DOCTYPE html><html><body>\n{links}</body></html>\n".encode()
        return 404, "text/plain", b"not found\n"

    def _go(self, rest: list[str]) -> tuple[int, str, bytes | Path]:
        if not self._complete(self.go):
            return 503, "text/plain", b"the Go module mirror is not filled: run `make tools`\n"
        if ".." in rest:
            return 404, "text/plain", b"not found\n"
        return _file(self.go / "proxy" / "/".join(rest), "application/octet-stream")

    def start(self) -> Mirror:
        mirror = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                part, status, ctype, body = mirror.resolve(self.path)
                data = body.read_bytes() if isinstance(body, Path) else body
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                mirror._record(part, self.path, status, len(data) if status == 200 else 0)

            def do_HEAD(self) -> None:
                _, status, ctype, body = mirror.resolve(self.path)
                size = body.stat().st_size if isinstance(body, Path) else len(body)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(size))
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = _Server((gitserver.check_host(self.host), self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, name="pko-mirror", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _file(path: Path, ctype: str) -> tuple[int, str, bytes | Path]:
    if path.is_file():
        return 200, ctype, path
    return 404, "text/plain", b"not found\n"


_HASHES: dict[Path, str] = {}


def _sha256(path: Path) -> str:
    if path not in _HASHES:
        _HASHES[path] = hashlib.sha256(path.read_bytes()).hexdigest()
    return _HASHES[path]


def npm_lockfile(mirror: Mirror, files: dict[str, str]) -> str:
    """The ``package-lock.json`` npm writes for the program `files` (its ``package.json``) against `mirror`'s
    registry, as a user commits it; kept beside the npm mirror, keyed by the manifest, so npm resolves each program
    once per filled mirror (about 13 s)."""
    manifest = files["package.json"]
    kept = mirror.npm / "lockfiles" / f"{hashlib.sha256(manifest.encode()).hexdigest()[:16]}.json"
    if kept.is_file():
        return kept.read_text()
    with tempfile.TemporaryDirectory(prefix="pko-lock-") as scratch:
        (Path(scratch) / "package.json").write_text(manifest)
        subprocess.run(["npm", "install", "--package-lock-only", "--ignore-scripts", "--no-audit", "--no-fund",
                        f"--registry={mirror.url}/npm/"], cwd=scratch, check=True, capture_output=True, timeout=300)
        text = (Path(scratch) / "package-lock.json").read_text()
    if f"{mirror.url}/" in text:
        raise MirrorError("npm wrote the mirror's own address into the lockfile")
    kept.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=kept.parent, prefix=f".{kept.stem}-", suffix=".tmp")
    with open(handle, "w") as out:  # a name of its own: two test processes may write the same lockfile at once
        out.write(text)
    Path(temporary).replace(kept)
    return text


def _semver_key(version: str) -> tuple[int, ...]:
    core = version.partition("-")[0]
    return tuple(int(n) if n.isdigit() else 0 for n in core.split("."))


def require_filled(*parts: str) -> None:
    """Fail loudly when `make tools` has not filled a part the caller needs."""
    for part in parts:
        if not (mirrorfill.part_dir(part) / ".complete").is_file():
            raise MirrorError(f"the {part} mirror is not in {mirrorfill.part_dir(part)}: run `make tools`")


class _Server(ThreadingHTTPServer):
    """A client that drops its idle keep-alive connection (the operator's dependency cache closing its pool) is no
    error of the mirror's: no traceback in the middle of a test's or a benchmark's output for it."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


@contextlib.contextmanager
def running(host: str = gitserver.LOOPBACK) -> Iterator[Mirror]:
    mirror = Mirror(host).start()
    try:
        yield mirror
    finally:
        mirror.stop()
