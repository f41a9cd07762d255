"""The bench's status paths: each status write of a followed Stack or Workspace is one step (a write that says the
same as the last is a step too; a change of metadata alone is none), repeats are folded, the commonest first; and
the option is the local fleet's only."""

from __future__ import annotations

from typing import Any

import pytest

from bench import statuspaths
from bench.harness import parse


def _obj(name: str, **conditions: tuple[str, str]) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": t, "status": s, "reason": r} for t, (s, r) in conditions.items()]}
    return {"metadata": {"name": name, "namespace": "fleet"}, "status": status if conditions else {}}


def test_each_status_write_is_a_step_and_repeats_are_folded() -> None:
    paths = statuspaths.Paths()
    for name in ("a", "b"):
        paths.add("Workspace", _obj(name))  # created: no status yet
        paths.add("Workspace", _obj(name, Ready=("False", "Queued")))
        paths.add("Workspace", _obj(name, Ready=("False", "Queued")))  # the same again: no write
        queued = _obj(name, Ready=("False", "Queued"))
        queued["status"]["conditions"][0]["message"] = "place 3"  # a write with the same reason
        paths.add("Workspace", queued)
        paths.add("Workspace", _obj(name, Ready=("True", "Succeeded")))
    paths.add("Workspace", _obj("c", Ready=("True", "Succeeded")))
    assert paths.writes("Workspace") == 7
    assert paths.most_common("Workspace") == [("Queued x2 → Succeeded", 2), ("Succeeded", 1)]
    assert paths.most_common("Stack") == []


def test_a_stack_step_is_its_reconciling_reason_while_it_reconciles() -> None:
    assert statuspaths.step("Stack", _obj("s", Ready=("False", "NotReadyInProgress"),
                                          Reconciling=("True", "Queued"))) == "Queued"
    assert statuspaths.step("Stack", _obj("s", Ready=("True", "ProcessingCompleted"),
                                          Reconciling=("False", "x"))) == "ProcessingCompleted"
    assert statuspaths.step("Workspace", _obj("w")) == "-"


def test_the_option_is_for_the_local_fleet() -> None:
    assert parse(["fleet", "--runtime", "local", "--operators", "pko", "--status-paths"]).status_paths
    with pytest.raises(SystemExit):
        parse(["fleet", "--status-paths"])
