"""Which changes of an Update bring it back to the Update controller: its creation, deletion, spec, owners, labels,
annotations and the moment it becomes Complete; not the status writes and finalizers of its own lifecycle."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pko.controllers.update import setup
from pko.runtime import store


def _update(**status: str) -> dict[str, Any]:
    return {"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update",
            "metadata": {"name": "u", "namespace": "ns", "generation": 1, "labels": {"a": "b"},
                         "ownerReferences": [{"apiVersion": "pulumi.com/v1", "kind": "Stack", "name": "s",
                                              "uid": "1", "controller": True}]},
            "spec": {"workspaceName": "s", "type": "up"},
            "status": {"conditions": [{"type": kind, "status": value, "reason": "r", "message": "",
                                       "lastTransitionTime": "2026-01-01T00:00:00Z"}
                                      for kind, value in status.items()]}}


def _modified(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return setup.update_changed(store.Event("MODIFIED", new, old))


def test_creation_and_deletion_always_count() -> None:
    assert setup.update_changed(store.Event("ADDED", _update()))
    assert setup.update_changed(store.Event("DELETED", _update(Complete="True")))


def test_own_status_writes_and_the_stack_finalizer_do_not() -> None:
    new = _update()
    assert not _modified(new, _update(Progressing="True", Complete="False"))
    with_finalizer = copy.deepcopy(new)
    with_finalizer["metadata"]["finalizers"] = ["finalizer.stack.pulumi.com"]
    assert not _modified(new, with_finalizer)
    done = _update(Progressing="False", Complete="True")
    released = copy.deepcopy(done)
    done["metadata"]["finalizers"] = ["finalizer.stack.pulumi.com"]
    assert not _modified(done, released)


def test_becoming_complete_does_once() -> None:
    running = _update(Progressing="True", Complete="False")
    done = _update(Progressing="False", Complete="True", Failed="False")
    assert _modified(running, done)
    assert not _modified(done, _update(Progressing="False", Complete="True", Failed="True"))


@pytest.mark.parametrize(("field", "value"), [
    ("generation", 2),
    ("ownerReferences", []),
    ("labels", {"a": "c"}),
    ("annotations", {"pulumi.com/plan-digest": "sha256:00"}),
    ("deletionTimestamp", "2026-01-01T00:00:00Z"),
])
def test_metadata_the_reconciler_reads(field: str, value: object) -> None:
    old = _update(Progressing="True")
    new = copy.deepcopy(old)
    new["metadata"][field] = value
    assert _modified(old, new)
