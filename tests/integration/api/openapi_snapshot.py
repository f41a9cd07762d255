"""Refresh ``src/pko/api/core_v1_openapi.json`` from a real API server.

Run ``python tests/integration/api/openapi_snapshot.py`` after changing the Kubernetes version of the test bed:
it starts the control plane (``pko.testing.controlplane``), reads ``/openapi/v3/api/v1`` and ``/version``, keeps
the core types our CRDs embed (:data:`pko.api.coretypes.ROOTS` and what they reference) and writes the snapshot.
``test_openapi_snapshot.py`` fails whenever the committed file differs from what the server serves.
"""

from __future__ import annotations

import json
import ssl
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from pko.api import coretypes
from pko.testing import controlplane

SNAPSHOT_PATH = Path(__file__).resolve().parents[3] / "src" / "pko" / "api" / coretypes.SNAPSHOT_FILE


def _get(server: str, path: str, token: str, ca_file: Path) -> Any:
    request = urllib.request.Request(f"{server}{path}", headers={"Authorization": f"Bearer {token}"})
    context = ssl.create_default_context(cafile=str(ca_file))
    with urllib.request.urlopen(request, timeout=30, context=context) as response:
        return json.load(response)


def build(server: str, token: str, ca_file: Path) -> dict[str, Any]:
    """The snapshot document for the API server at `server`."""
    version = _get(server, "/version", token, ca_file)["gitVersion"]
    document = _get(server, "/openapi/v3/api/v1", token, ca_file)
    return {
        "source": "/openapi/v3/api/v1",
        "kubernetesVersion": version,
        "schemas": coretypes.extract(document["components"]["schemas"]),
    }


def dumps(snapshot: dict[str, Any]) -> str:
    return json.dumps(snapshot, indent=1, sort_keys=True) + "\n"


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="pko-openapi-") as workdir, \
            controlplane.start(Path(workdir)) as cp:
        snapshot = build(cp.server, cp.admin_token, cp.ca_file)
    SNAPSHOT_PATH.write_text(dumps(snapshot), encoding="utf-8")
    print(f"wrote {SNAPSHOT_PATH} ({snapshot['kubernetesVersion']}, {len(snapshot['schemas'])} types)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
