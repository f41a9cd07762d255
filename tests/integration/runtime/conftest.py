"""Fixtures of the runtime integration tests: a pko client, a fresh namespace per test, and ``eventually``."""

from __future__ import annotations

import functools
import json
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from lightkube import AsyncClient

from pko.kube import resources
from pko.kube.client import Client
from pko.testing import controlplane, waiting

LIVENESS = 60.0
"""How long a test waits for something that must happen before calling it a failure (never a speed target)."""

Eventually = Callable[..., Awaitable[None]]


@pytest.fixture
def client(kube: AsyncClient) -> Client:
    return Client(kube)


@pytest.fixture
async def namespace(client: Client) -> AsyncIterator[str]:
    name = f"rt-{uuid.uuid4().hex[:8]}"
    await client.create(resources.NAMESPACE.new(name))
    yield name
    await client.delete(resources.NAMESPACE, name, missing_ok=True)


@pytest.fixture
def eventually() -> Eventually:
    """``await eventually(lambda: cond, "what")``: wait until ``cond`` holds, fail after a liveness bound."""
    return functools.partial(waiting.eventually, timeout=LIVENESS)


@pytest.fixture
def compact_etcd(control_plane: controlplane.ControlPlane) -> Callable[[str], None]:
    """Compact etcd up to a revision, as the API server does every few minutes, so older watches get 410 Gone."""
    url = control_plane.etcd_url

    def compact(revision: str) -> None:
        body = json.dumps({"revision": revision, "physical": True}).encode()
        request = urllib.request.Request(f"{url}/v3/kv/compaction", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()

    return compact
