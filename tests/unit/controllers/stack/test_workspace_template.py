"""A Stack's `workspaceTemplate.spec.shareVolume` (docs/scale-to-zero.md#keep-what-a-workspace-installed) reaches its
Workspace; a size the Workspace CRD would refuse stalls the Stack with the CRD's own words instead of failing at
every apply (the API server does not check a workspaceTemplate, an apply configuration)."""

from __future__ import annotations

from typing import Any

import pytest

from pko.api import stack as stack_api
from pko.controllers.stack import workspace as ws_build


def _desired(**spec: Any) -> dict[str, Any]:
    stack = stack_api.Stack.model_validate({
        "metadata": {"name": "app", "namespace": "ns", "uid": "u-1", "generation": 1},
        "spec": {"stack": "dev", **spec}})
    return ws_build.desired(stack, ws_build.Source())


def test_a_share_volume_reaches_the_workspace() -> None:
    assert "shareVolume" not in _desired()["spec"]
    share = {"size": "2Gi", "storageClassName": "fast"}
    assert _desired(workspaceTemplate={"spec": {"shareVolume": share}})["spec"]["shareVolume"] == share
    assert _desired(workspaceTemplate={"spec": {"shareVolume": {"size": "0"}}})["spec"]["shareVolume"] == {
        "size": "0"}


@pytest.mark.parametrize("size", ["lots", "2 Gi", "-1Gi", None])
def test_a_size_that_is_no_quantity_stalls_the_stack_with_a_message(size: str | None) -> None:
    with pytest.raises(ws_build.StallError) as stalled:
        _desired(workspaceTemplate={"spec": {"shareVolume": {"size": size}}})
    assert str(stalled.value).startswith(
        "workspaceTemplate.spec.shareVolume.size must be a storage quantity such as 2Gi or 500Mi")
