"""Hostile Flux artifacts, end to end: a Stack whose Flux source's artifact climbs out of the tree, links out of it,
has the wrong digest or is truncated never becomes Ready; its Workspace's Ready condition names the problem (the
agent's `init` refused the archive), the Stack's Reconciling condition carries it ("waiting for workspace readiness:
…") with one WorkspaceNotReady Warning event, and nothing is written outside the workspace.

No source-controller here: a GitRepository (the real Flux CRD) gets its `status.artifact` set by the test, pointing
at an HTTP server on loopback that serves the hostile bytes, which is exactly what the operator and the agent see
from a compromised or buggy source."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import lightkube
import pytest
import stack_e2e as e2e

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import controlplane, flux, operator, waiting

pytestmark = [pytest.mark.controlplane]

SOURCE_REF = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository"}


def _tarball(*members: tuple[str, bytes, str]) -> bytes:
    """(name, content, symlink target) members; a non-empty target makes a symlink."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data, link in members:
            info = tarfile.TarInfo(name)
            if link:
                info.type, info.linkname = tarfile.SYMTYPE, link
                archive.addfile(info)
            else:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


PROJECT = b"name: hostile\nruntime: yaml\n"
GOOD = _tarball(("Pulumi.yaml", PROJECT, ""))
CASES: dict[str, tuple[bytes, str, str]] = {  # name: (served bytes, digest of, expected words)
    "traversal": (_tarball(("Pulumi.yaml", PROJECT, ""), ("../../pko-hostile-escape.txt", b"x", "")), "served",
                  "refusing archive entry '../../pko-hostile-escape.txt'"),
    "symlink-out": (_tarball(("Pulumi.yaml", PROJECT, ""), ("etc", b"", "/etc")), "served",
                    "refusing archive entry 'etc'"),
    "wrong-digest": (GOOD, "other", "computed digest doesn't match"),
    "truncated": (GOOD[: len(GOOD) // 2], "served", "unable to read the archive"),
}


@pytest.fixture(scope="module")
async def flux_crds(cluster: controlplane.ControlPlane) -> None:
    async with kclient.Client.connect(lightkube.KubeConfig.from_file(str(cluster.kubeconfig))) as client:
        await flux.install_crds(client)


@pytest.fixture(scope="module")
def artifact_server() -> Iterator[tuple[str, dict[str, bytes]]]:
    served: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            body = served.get(self.path, b"")
            self.send_response(200 if self.path in served else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", served
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
async def hostile_operator(cluster: controlplane.ControlPlane, namespace: str, tmp_path: Path,
                           pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
                           ) -> AsyncIterator[operator.Operator]:
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    async with operator.running(cluster.kubeconfig, tmp_path / "workspaces", namespace=namespace) as op:
        yield op


async def _source_with_artifact(kc: kclient.Client, namespace: str, name: str, url: str, digest: str) -> None:
    await kc.create(resources.GIT_REPOSITORY.new(name, namespace, spec={
        "url": "https://example.invalid/repo.git", "interval": "1h", "ref": {"branch": "main"}, "suspend": True}))
    obj = await kc.get(resources.GIT_REPOSITORY, name, namespace)
    obj["status"] = {"artifact": {"url": url, "digest": digest, "revision": f"main@sha1:{'a' * 40}",
                                  "path": f"gitrepository/{namespace}/{name}/a.tar.gz",
                                  "lastUpdateTime": "2026-01-01T00:00:00Z"}}
    await kc.replace_status(obj)


def _words(obj: dict[str, Any]) -> str:
    return json.dumps((obj.get("status") or {}).get("conditions") or [])


@pytest.mark.parametrize("case", sorted(CASES))
async def test_hostile_artifact_gives_a_precise_condition_and_event(
        case: str, kc: kclient.Client, namespace: str, flux_crds: None,
        artifact_server: tuple[str, dict[str, bytes]], hostile_operator: operator.Operator,
        tmp_path: Path) -> None:
    base, served = artifact_server
    data, digest_of, words = CASES[case]
    served[f"/{namespace}/{case}.tar.gz"] = data
    digest = "sha256:" + hashlib.sha256(data if digest_of == "served" else b"something else").hexdigest()
    await _source_with_artifact(kc, namespace, case, f"{base}/{namespace}/{case}.tar.gz", digest)
    await kc.create(resources.STACK.new(case, namespace, spec={
        "stack": "dev", "fluxSource": {"sourceRef": {**SOURCE_REF, "name": case}}}))
    workspace = await waiting.wait_for(kc, resources.WORKSPACE, case, namespace, lambda o: words in _words(o),
                                       timeout=90)
    assert waiting.condition(workspace, "Ready").get("status") != "True"
    stack = await waiting.wait_for(kc, resources.STACK, case, namespace, lambda o: words in _words(o), timeout=30)
    reconciling = waiting.condition(stack, "Reconciling")
    assert reconciling.get("message", "").startswith("waiting for workspace readiness: "), reconciling
    assert waiting.condition(stack, "Ready").get("status") != "True"
    assert e2e.last_update(stack) == {}
    events = await e2e.events_with(kc, case, namespace, "WorkspaceNotReady")
    assert all(words in e["message"] and e["type"] == "Warning" for e in events), events
    assert not (tmp_path / "pko-hostile-escape.txt").exists()
    assert not list(tmp_path.rglob("pko-hostile-escape.txt"))
