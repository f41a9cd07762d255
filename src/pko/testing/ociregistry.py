"""A real OCI distribution registry: go-containerregistry's in-memory registry (built by `make tools` as
`oci-registry`), and pushes to it over the registry's HTTP API — of a Flux artifact, and of an image.

Why: `fluxSource.sourceRef` may name an OCIRepository, and source-controller pulls such artifacts with its own
registry client; a test that stands in for the registry would prove nothing about that pull. What is pushed here is
what `flux push artifact` pushes: an OCI image manifest whose config is Flux's (empty) config and whose one layer
is a gzipped tarball of the files, so source-controller extracts it as it would a user's. Images (the provider
plugins' images that workspaces mount, :mod:`pko.testing.pluginimages`) are pushed as `docker push` sends them,
gzipped layers, so the test node's kubelet pulls them as it pulls from a platform team's registry; the registry's
log says what was asked of it (:meth:`Registry.served`).

It listens only on loopback or an address of this machine (as the git server does), over plain HTTP: an
OCIRepository reaches it with `insecure: true`.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import subprocess
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pko.testing import binaries, gitserver, oci, ports

#: The media types of a Flux artifact (`flux push artifact`).
FLUX_CONFIG = "application/vnd.cncf.flux.config.v1+json"
FLUX_CONTENT = "application/vnd.cncf.flux.content.v1.tar+gzip"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


class RegistryError(RuntimeError):
    """The registry could not start or refused a push."""


@dataclass(frozen=True)
class Pushed:
    """An image as pushed: its manifest's digest and its (compressed) layers."""

    digest: str
    layers: tuple[oci.Descriptor, ...]


@dataclass
class Registry:
    host: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def address(self) -> str:
        """`host:port`, as an OCIRepository's `oci://` URL names it."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def url(self, repository: str) -> str:
        """The `spec.url` of an OCIRepository for `repository`."""
        return f"oci://{self.address}/{repository}"

    def _request(self, method: str, path_or_url: str, data: bytes | None = None,
                 headers: Mapping[str, str] | None = None) -> tuple[int, Mapping[str, str], bytes]:
        url = path_or_url if "://" in path_or_url else f"http://{self.address}{path_or_url}"
        request = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as err:
            raise RegistryError(f"{method} {url}: {err.code} {err.read()[:500]!r}") from None

    def _blob(self, repository: str, data: bytes) -> str:
        digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
        _, headers, _ = self._request("POST", f"/v2/{repository}/blobs/uploads/")
        location = urllib.parse.urljoin(f"http://{self.address}/", headers["Location"])
        separator = "&" if "?" in location else "?"
        self._request("PUT", f"{location}{separator}digest={urllib.parse.quote(digest)}", data,
                      {"Content-Type": "application/octet-stream"})
        return digest

    def push_flux_artifact(self, repository: str, tag: str, files: Mapping[str, str],
                           revision: str = "") -> str:
        """Push `files` (path → text) as a Flux artifact tagged `tag`; its manifest's digest."""
        content = _tarball(files)
        config = b"{}"
        manifest = {
            "schemaVersion": 2, "mediaType": OCI_MANIFEST,
            "config": {"mediaType": FLUX_CONFIG, "digest": self._blob(repository, config), "size": len(config)},
            "layers": [{"mediaType": FLUX_CONTENT, "digest": self._blob(repository, content), "size": len(content)}],
            "annotations": {"org.opencontainers.image.created": "2026-01-01T00:00:00Z",
                            **({"org.opencontainers.image.revision": revision} if revision else {})},
        }
        return self._manifest(repository, tag, manifest)

    def push_image(self, repository: str, tag: str, layers: Sequence[Path], config: Mapping[str, Any]) -> Pushed:
        """Push an image of uncompressed `layers` (bottom first) and `config` (its ``rootfs`` set here), each layer
        gzipped as `docker push` sends it."""
        diff_ids, descriptors = [], []
        for layer in layers:
            raw = layer.read_bytes()
            diff_ids.append(oci.sha256_bytes(raw))
            packed = gzip.compress(raw, compresslevel=6, mtime=0)
            descriptors.append(oci.Descriptor(oci.MEDIA_LAYER_GZIP, self._blob(repository, packed), len(packed)))
        config_bytes = oci.canonical_json({**config, "rootfs": {"type": "layers", "diff_ids": diff_ids}})
        digest = self._manifest(repository, tag, {
            "schemaVersion": 2, "mediaType": OCI_MANIFEST,
            "config": {"mediaType": oci.MEDIA_CONFIG, "digest": self._blob(repository, config_bytes),
                       "size": len(config_bytes)},
            "layers": [d.to_json() for d in descriptors],
        })
        return Pushed(digest, tuple(descriptors))

    def _manifest(self, repository: str, tag: str, manifest: Mapping[str, Any]) -> str:
        body = json.dumps(manifest, separators=(",", ":")).encode()
        self._request("PUT", f"/v2/{repository}/manifests/{tag}", body, {"Content-Type": OCI_MANIFEST})
        return f"sha256:{hashlib.sha256(body).hexdigest()}"

    def served(self, repository: str) -> list[str]:
        """The requests `repository` answered, from the registry's log, as ``METHOD what`` (``GET manifests/4.19.1``,
        ``GET blobs/sha256:…``): what a client really pulled. Refused ones (a missing tag) are left out."""
        prefix = f"/v2/{repository}/"
        found = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            parts = line.split()
            # "2026/12/07 07:00:00 GET /v2/<repository>/manifests/<ref>" (a refusal adds its status and code)
            if len(parts) == 4 and parts[3].startswith(prefix):
                found.append(f"{parts[2]} {parts[3][len(prefix):]}")
        return found

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def _tarball(files: Mapping[str, str]) -> bytes:
    """A deterministic gzipped tarball of `files`."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def start(workdir: Path, host: str = gitserver.LOOPBACK) -> Registry:
    """Start the registry on `host`; fails loudly when `make tools` has not built it."""
    binary = binaries.require("oci-registry")
    gitserver.check_host(host)
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "oci-registry.log"

    def launch(port: int) -> Registry:
        listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        process = subprocess.Popen([str(binary), "-addr", listen], stdout=log_path.open("ab"),
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return Registry(host, port, process, log_path)

    def answers(registry: Registry) -> bool:
        if registry.process.poll() is not None:
            return False
        try:
            registry._request("GET", "/v2/")
        except (OSError, RegistryError):
            return False
        return True

    started = ports.start_on_free_port(launch, answers)
    if started is not None:
        return started
    raise RegistryError(f"the OCI registry did not start on {host}:\n{log_path.read_text()[-2000:]}")


@contextlib.contextmanager
def running(workdir: Path, host: str = gitserver.LOOPBACK) -> Iterator[Registry]:
    registry = start(workdir, host)
    try:
        yield registry
    finally:
        registry.stop()
