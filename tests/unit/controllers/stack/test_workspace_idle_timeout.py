"""pko's `spec.workspaceIdleTimeout` (docs/scale-to-zero.md) reaches the Workspace as `spec.idleTimeout`; left out,
the Workspace is the Go operator's (no field), and a `workspaceTemplate` can still set or override it."""

from __future__ import annotations

from typing import Any

from pko.api import stack as stack_api
from pko.controllers.stack import workspace as ws_build


def _desired(**spec: Any) -> dict[str, Any]:
    stack = stack_api.Stack.model_validate({
        "metadata": {"name": "app", "namespace": "ns", "uid": "u-1", "generation": 1},
        "spec": {"stack": "dev", **spec}})
    return ws_build.desired(stack, ws_build.Source())


def test_the_idle_timeout_is_passed_to_the_workspace() -> None:
    assert "idleTimeout" not in _desired()["spec"]
    assert _desired(workspaceIdleTimeout="15m")["spec"]["idleTimeout"] == "15m"
    assert _desired(workspaceIdleTimeout="0s")["spec"]["idleTimeout"] == "0s"
    overridden = _desired(workspaceIdleTimeout="15m", workspaceTemplate={"spec": {"idleTimeout": "1h"}})
    assert overridden["spec"]["idleTimeout"] == "1h"
    assert _desired(workspaceTemplate={"spec": {"idleTimeout": "1h"}})["spec"]["idleTimeout"] == "1h"
