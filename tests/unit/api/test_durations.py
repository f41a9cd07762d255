"""Go duration strings parse and print as Go's time package does."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pko.api import durations


@pytest.mark.parametrize(("text", "seconds"), [
    ("24h", 86400.0), ("1h30m", 5400.0), ("90s", 90.0), ("1.5h", 5400.0), ("300ms", 0.3), ("0", 0.0),
    ("2h45m30s", 9930.0), ("-5s", -5.0), ("1m0.5s", 60.5), ("+5s", 5.0), ("-0", 0.0), (".5s", 0.5),
    ("5.s", 5.0), ("2562047h", 9223369200.0),
])
def test_parse(text: str, seconds: float) -> None:
    assert durations.parse(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", [
    "", "5", "h", "1d", "1h 30m", "abc", "1.2.3s", "--5s", " 5s", "5s ", "+-5s", "-+5s", "+", "-", "3000000h",
])
def test_parse_rejects_what_go_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        durations.parse(text)


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (1.5, "1.5s"), (60, "1m0s"), (3723, "1h2m3s"), (86400, "24h0m0s"), (-5, "-5s"),
])
def test_format(seconds: float, text: str) -> None:
    assert durations.format_seconds(seconds) == text


@given(st.integers(min_value=0, max_value=10**7))
def test_round_trip_whole_seconds(seconds: int) -> None:
    assert durations.parse(durations.format_seconds(seconds)) == seconds
