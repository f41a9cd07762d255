"""A real S3-compatible object store for Pulumi state: gofakes3 (built by `make tools`), as self-managed users keep
their state in MinIO, Ceph or S3 itself.

Stacks reach it the way those users do, with ``PULUMI_BACKEND_URL=s3://<bucket>?endpoint=…&use_path_style=true``
and AWS credentials in the environment; the Pulumi CLI talks S3 to it through its own blob library. Tests read the
bucket back with plain S3 requests (:meth:`ObjectStore.keys`, :meth:`ObjectStore.get`), so what they assert about
state and locks is what is really stored. The server keeps objects in memory for its lifetime (the test bed's
store outlives every pod that writes to it). It does not check request signatures: the credentials pods present
are a real store's shape, not a secret here.

It listens only on loopback or an address of this machine (as the git server does).
"""

from __future__ import annotations

import contextlib
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pko.testing import binaries, gitserver, ports

BUCKET = "pulumi-state"
ACCESS_KEY = "pko-test"
SECRET_KEY = "pko-test-secret-key"  # gofakes3 checks no signature; a real store's credentials have this shape
REGION = "us-east-1"
_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class ObjectStoreError(RuntimeError):
    """The object store could not start or answered an error (`status`: its HTTP status, when it answered)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class ObjectStore:
    host: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    bucket: str = BUCKET
    _closed: bool = field(default=False)

    @property
    def endpoint(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def backend_url(self, prefix: str = "") -> str:
        """``PULUMI_BACKEND_URL`` for this bucket (optionally under a key prefix, one per tenant)."""
        path = f"/{prefix.strip('/')}" if prefix else ""
        query = urllib.parse.urlencode({"endpoint": self.endpoint, "use_path_style": "true", "region": REGION})
        return f"s3://{self.bucket}{path}?{query}"

    def env(self) -> dict[str, str]:
        """The credentials a Pulumi CLI presents (pods get them from a Secret)."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION}

    def _request(self, method: str, key: str = "", query: str = "", data: bytes | None = None) -> bytes:
        url = f"{self.endpoint}/{self.bucket}" + (f"/{urllib.parse.quote(key)}" if key else "")
        if query:
            url += f"?{query}"
        request = urllib.request.Request(url, data=data, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                body: bytes = response.read()
                return body
        except urllib.error.HTTPError as err:
            raise ObjectStoreError(f"{method} {url}: {err.code} {err.read()[:300]!r}", err.code) from None

    def keys(self, prefix: str = "") -> list[str]:
        """Every object key under `prefix` (all pages)."""
        found: list[str] = []
        token = ""
        while True:
            params = {"list-type": "2", "prefix": prefix, **({"continuation-token": token} if token else {})}
            root = ET.fromstring(self._request("GET", query=urllib.parse.urlencode(params)))
            found += [c.findtext(f"{_NS}Key") or "" for c in root.iter(f"{_NS}Contents")]
            token = root.findtext(f"{_NS}NextContinuationToken") or ""
            if root.findtext(f"{_NS}IsTruncated") != "true" or not token:
                return found

    def get(self, key: str) -> bytes:
        return self._request("GET", key)

    def get_or_none(self, key: str) -> bytes | None:
        """The object, or None when it is not there: a lock listed a moment ago may be released before it is read."""
        try:
            return self.get(key)
        except ObjectStoreError as err:
            if err.status == 404:
                return None
            raise

    def put(self, key: str, data: bytes) -> None:
        self._request("PUT", key, data=data)

    def stop(self) -> None:
        if not self._closed and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._closed = True


def start(workdir: Path, host: str = gitserver.LOOPBACK, bucket: str = BUCKET) -> ObjectStore:
    """Start gofakes3 on `host` with `bucket` made; fails loudly when `make tools` has not built it."""
    binary = binaries.require("gofakes3")
    gitserver.check_host(host)
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "gofakes3.log"

    def launch(port: int) -> ObjectStore:
        process = subprocess.Popen(
            [str(binary), "-backend", "memory", "-initialbucket", bucket, "-host", f"{host}:{port}", "-quiet"],
            stdout=log_path.open("ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        return ObjectStore(host, port, process, log_path, bucket)

    def answers(store: ObjectStore) -> bool:
        if store.process.poll() is not None:
            return False
        try:
            store.keys()
        except (OSError, ObjectStoreError):
            return False
        return True

    started = ports.start_on_free_port(launch, answers)
    if started is not None:
        return started
    raise ObjectStoreError(f"gofakes3 did not start on {host}:\n{log_path.read_text()[-2000:]}")


@contextlib.contextmanager
def running(workdir: Path, host: str = gitserver.LOOPBACK, bucket: str = BUCKET) -> Iterator[ObjectStore]:
    store = start(workdir, host, bucket)
    try:
        yield store
    finally:
        store.stop()
