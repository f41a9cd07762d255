"""The committed core/v1 OpenAPI snapshot is exactly what the API server we build against serves."""

from __future__ import annotations

import json

from openapi_snapshot import SNAPSHOT_PATH, build, dumps

from pko.api import coretypes
from pko.testing import controlplane


def test_snapshot_matches_the_running_api_server(control_plane: controlplane.ControlPlane) -> None:
    served = build(control_plane.server, control_plane.admin_token, control_plane.ca_file)
    committed = json.loads(SNAPSHOT_PATH.read_text(encoding="utf-8"))
    assert committed["kubernetesVersion"] == served["kubernetesVersion"], \
        "the test bed's Kubernetes changed: run `python tests/integration/api/openapi_snapshot.py`"
    assert committed == served, "snapshot is stale: run `python tests/integration/api/openapi_snapshot.py`"
    # The file is byte-for-byte what the refresh script writes (no hand edits).
    assert SNAPSHOT_PATH.read_text(encoding="utf-8") == dumps(served)


def test_the_package_loads_the_committed_snapshot() -> None:
    assert coretypes.snapshot() == json.loads(SNAPSHOT_PATH.read_text(encoding="utf-8"))
    assert set(coretypes.ROOTS) <= set(coretypes.snapshot()["schemas"])
