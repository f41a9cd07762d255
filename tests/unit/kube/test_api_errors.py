"""API failures map to typed exceptions by status code (and reason, for AlreadyExists); selectors render."""

from __future__ import annotations

import pytest

from pko import kube
from pko.kube import client, errors


@pytest.mark.parametrize(
    ("code", "reason", "expected"),
    [
        (404, "NotFound", kube.NotFound),
        (409, "Conflict", kube.Conflict),
        (409, "AlreadyExists", kube.AlreadyExists),
        (410, "Expired", kube.Gone),
        (422, "Invalid", kube.Invalid),
        (403, "Forbidden", kube.Forbidden),
        (500, "InternalError", kube.ApiError),
    ],
)
def test_status_codes_pick_the_exception(code: int, reason: str, expected: type[errors.ApiError]) -> None:
    err = errors.from_status(code, reason, "message")
    assert type(err) is expected
    assert (err.code, err.reason, err.message) == (code, reason, "message")
    assert isinstance(err, kube.ApiError)


def test_already_exists_is_a_conflict() -> None:
    assert isinstance(errors.from_status(409, "AlreadyExists"), kube.Conflict)


def test_label_selector() -> None:
    assert client.label_selector(None) is None
    assert client.label_selector({}) is None
    assert client.label_selector({"b": "2", "a": "1"}) == "a=1,b=2"
