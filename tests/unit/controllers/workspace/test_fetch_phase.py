"""The fetch phase of pko's `pulumi_update_phase_duration_seconds` in the pod runtime: how long the workspace pod's
`fetch` init container ran, from the kubelet's times; nothing until it finished successfully."""

from __future__ import annotations

from typing import Any

import pytest

from pko.controllers.workspace import pod


def _fetch_status(state: dict[str, Any]) -> dict[str, Any]:
    return {"status": {"initContainerStatuses": [
        {"name": "bootstrap", "state": {"terminated": {"exitCode": 0, "startedAt": "2025-03-01T12:00:00Z",
                                                       "finishedAt": "2025-03-01T12:00:01Z"}}},
        {"name": "fetch", "state": state},
    ]}}


def test_the_fetch_phase_is_the_fetch_init_containers_run() -> None:
    done = {"terminated": {"exitCode": 0, "startedAt": "2025-03-01T12:00:01Z", "finishedAt": "2025-03-01T12:00:09Z"}}
    assert pod.fetch_seconds(_fetch_status(done)) == 8.0


@pytest.mark.parametrize("state", [
    {"running": {"startedAt": "2025-03-01T12:00:01Z"}},
    {"terminated": {"exitCode": 1, "startedAt": "2025-03-01T12:00:01Z", "finishedAt": "2025-03-01T12:00:09Z"}},
])
def test_an_unfinished_or_failed_fetch_has_no_duration(state: dict[str, Any]) -> None:
    assert pod.fetch_seconds(_fetch_status(state)) is None
    assert pod.fetch_seconds({}) is None
