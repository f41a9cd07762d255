"""The operator loads what a feature needs when the feature is used: Git (dulwich), GitHub App tokens (PyJWT,
cryptography) and the HTTP client of rollout gates (httpx) are some 20 MB of a resting operator's memory, and most
operators use some of them or none. Checked on the modules a fresh interpreter holds, not on memory."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

from pko.controllers.rollout import gates

LAZY = ("dulwich", "jwt", "cryptography", "httpx", "paramiko", "pko.sources.ssh")

IMPORT = """
import json, sys
import pko.cli.operator
from pko.controllers import wiring
print(json.dumps(sorted(sys.modules)))
"""


def test_the_operator_loads_no_git_jwt_or_gate_http_client_until_it_needs_them() -> None:
    out = subprocess.run([sys.executable, "-c", IMPORT], check=True, capture_output=True, text=True).stdout
    modules = json.loads(out)
    loaded = [m for m in modules if any(m == p or m.startswith(p + ".") for p in LAZY)]
    assert loaded == []
    assert "pko.sources.git" in modules  # the module is there; what it needs to talk to a remote is not


def test_a_gate_client_makes_its_http_client_on_first_use_and_closes_it() -> None:
    client = gates.GateClient({"User-Agent": "pko/test"})
    assert client._client is None
    made = client.client
    assert client.client is made
    assert made.headers["User-Agent"] == "pko/test"
    assert made.follow_redirects is False
    asyncio.run(client.aclose())
    assert client._client is None
