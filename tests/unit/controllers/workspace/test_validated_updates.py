"""The Workspace controller's Update models (setup.ValidatedUpdates): one validation for each version of an Update,
a new one when its resourceVersion moves, an object without uid or version validated every time, and no more kept
than asked."""

from __future__ import annotations

from typing import Any
from unittest import mock

from pko.api import update as up_api
from pko.controllers.workspace import setup


def _update(uid: str | None, version: str | None, complete: str = "False") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "u", "namespace": "ns"}
    if uid:
        meta["uid"] = uid
    if version:
        meta["resourceVersion"] = version
    return {"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update", "metadata": meta,
            "spec": {"workspaceName": "w", "stackName": "dev", "type": "up"},
            "status": {"conditions": [{"type": "Complete", "status": complete, "reason": "r", "message": "",
                                       "lastTransitionTime": "2026-12-06T10:00:00Z"}]}}


def _complete(model: up_api.Update) -> str:
    assert model.status is not None
    assert model.status.conditions
    return model.status.conditions[0].status


def test_one_validation_a_version_and_a_new_one_when_it_moves() -> None:
    typed = setup.ValidatedUpdates()
    with mock.patch.object(up_api.Update, "model_validate", wraps=up_api.Update.model_validate) as validate:
        first = typed(_update("a", "1"))
        assert typed(_update("a", "1")) is first
        assert validate.call_count == 1
        moved = typed(_update("a", "2", complete="True"))
        assert validate.call_count == 2
    assert (_complete(first), _complete(moved)) == ("False", "True")


def test_without_uid_or_version_each_is_validated() -> None:
    typed = setup.ValidatedUpdates()
    with mock.patch.object(up_api.Update, "model_validate", wraps=up_api.Update.model_validate) as validate:
        typed(_update(None, "1"))
        typed(_update(None, "1"))
        typed(_update("a", None))
        assert validate.call_count == 3


def test_no_more_are_kept_than_asked_the_oldest_dropped_first() -> None:
    typed = setup.ValidatedUpdates(kept=2)
    first = typed(_update("a", "1"))
    typed(_update("b", "1"))
    typed(_update("c", "1"))
    assert len(typed._models) == 2
    assert typed(_update("a", "1")) is not first  # dropped, so validated again
    assert typed(_update("c", "1")) is typed(_update("c", "1"))
