"""`resume.finished_since`: which history entry may stand for the result of an `up` the operator lost."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from pko.agent import resume

AFTER = datetime.datetime(2026, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)


def _history(**entry: Any) -> str:
    return json.dumps([{"kind": "update", "result": "succeeded", "startTime": "2026-05-01T12:00:03.000Z"} | entry])


@pytest.mark.parametrize("result", ["succeeded", "failed"])
def test_an_update_begun_since_and_over_stands_for_the_lost_one(result: str) -> None:
    assert resume.finished_since(_history(result=result), AFTER)


def test_an_update_begun_in_the_next_second_counts() -> None:
    assert resume.finished_since(_history(startTime="2026-05-01T12:00:01.000Z"), AFTER.replace(microsecond=900000))


def test_an_update_begun_in_the_same_second_does_not() -> None:
    """It may be the lost Update's predecessor: begun a moment before the lost one was started, in that second (a
    chaos run resumed exactly that, and its Stack kept the old outputs at the new generation)."""
    assert not resume.finished_since(_history(startTime="2026-05-01T12:00:00.000Z"), AFTER)
    assert not resume.finished_since(_history(startTime="2026-05-01T12:00:00.000Z"),
                                     AFTER.replace(microsecond=900000))


def test_an_earlier_update_does_not() -> None:
    assert not resume.finished_since(_history(startTime="2026-05-01T11:59:59.000Z"), AFTER)


@pytest.mark.parametrize("entry", [
    {"result": "in-progress"}, {"kind": "refresh"}, {"kind": "destroy"},
    {"startTime": None}, {"startTime": "yesterday"}, {"startTime": "2026-05-01T12:00:03"},  # no zone: unreadable
])
def test_anything_else_means_up_runs(entry: dict[str, Any]) -> None:
    assert not resume.finished_since(_history(**entry), AFTER)


@pytest.mark.parametrize("text", ["", "[]", "{}", "not json", "[1]", "null"])
def test_no_usable_history_means_up_runs(text: str) -> None:
    assert not resume.finished_since(text, AFTER)
