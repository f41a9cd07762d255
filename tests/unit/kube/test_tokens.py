"""A TokenRequest's answer read as the operator's agent token (pko.kube.tokens.issued)."""

from __future__ import annotations

import datetime

import pytest

from pko.kube import errors, tokens

NOW = datetime.datetime(2026, 12, 4, 20, 0, tzinfo=datetime.UTC)


def test_the_token_and_the_expiry_the_server_names() -> None:
    token = tokens.issued({"status": {"token": "abc", "expirationTimestamp": "2026-12-04T21:00:00Z"}}, "ns/sa", 600,
                          NOW)
    assert token.value == "abc"
    assert token.expires == datetime.datetime(2026, 12, 4, 21, 0, tzinfo=datetime.UTC)
    assert "abc" not in repr(token)


@pytest.mark.parametrize("expiry", [None, "", "yesterday"])
def test_no_readable_expiry_means_the_seconds_asked_for(expiry: str | None) -> None:
    status: dict[str, object] = {"token": "abc"}
    if expiry is not None:
        status["expirationTimestamp"] = expiry
    assert tokens.issued({"status": status}, "ns/sa", 600, NOW).expires == NOW + datetime.timedelta(seconds=600)


@pytest.mark.parametrize("answer", [{}, {"status": None}, {"status": {"token": ""}}, {"status": {"token": 3}}, []])
def test_an_answer_without_a_token_is_an_error_naming_the_account(answer: object) -> None:
    with pytest.raises(errors.ApiError, match="TokenRequest for ns/sa returned no token"):
        tokens.issued(answer, "ns/sa", 600, NOW)
