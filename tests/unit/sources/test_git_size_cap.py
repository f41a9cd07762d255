"""The git size cap's pure rules: ``GIT_MAX_FETCH_SIZE_BYTES`` read into a number of bytes (default 1 GiB, ``-1``
for none, anything else refused rather than read as no cap), and the budget that stops a fetch at the first chunk
past the cap, with a message naming the cap and the variable but never a password."""

from __future__ import annotations

import pytest

from pko.sources import git


@pytest.mark.parametrize(("raw", "expected"), [
    (None, git.DEFAULT_MAX_FETCH_SIZE),
    ("", git.DEFAULT_MAX_FETCH_SIZE),
    ("  ", git.DEFAULT_MAX_FETCH_SIZE),
    ("65536", 65536),
    (" 1048576 ", 1048576),
    ("0", 0),
    ("-1", git.UNLIMITED),
])
def test_max_fetch_size_reads_the_variable(raw: str | None, expected: int) -> None:
    env = {} if raw is None else {"GIT_MAX_FETCH_SIZE_BYTES": raw}
    assert git.max_fetch_size(env) == expected


def test_default_is_one_gibibyte() -> None:
    assert git.DEFAULT_MAX_FETCH_SIZE == 1024 ** 3


@pytest.mark.parametrize("raw", ["1Gi", "1e9", "1.5", "-2", "ten", "0x10", "--1", "1 000"])
def test_an_invalid_value_is_refused_with_the_variable_named(raw: str) -> None:
    with pytest.raises(git.GitError, match=r"invalid GIT_MAX_FETCH_SIZE_BYTES .*-1 for no cap"):
        git.max_fetch_size({"GIT_MAX_FETCH_SIZE_BYTES": raw})


def test_the_budget_stops_at_the_first_chunk_past_the_cap() -> None:
    budget = git._Budget(100, "https://alice:s3cret@example.com/repo.git")
    budget.take(60)
    budget.take(40)  # exactly the cap: still fine
    with pytest.raises(git.TooLargeError) as raised:
        budget.take(1)
    message = str(raised.value)
    assert "more than 100 bytes" in message
    assert "GIT_MAX_FETCH_SIZE_BYTES" in message
    assert "https://alice@example.com/repo.git" in message
    assert "s3cret" not in message


def test_an_unlimited_budget_takes_anything() -> None:
    budget = git._Budget(git.UNLIMITED, "https://example.com/repo.git")
    budget.take(10 ** 12)
    budget.take(10 ** 12)
    assert budget.received == 2 * 10 ** 12
