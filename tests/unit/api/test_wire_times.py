"""metav1.Time on the wire: written in whole UTC seconds, read back the same, and anything else read (or refused)
exactly as ``strptime`` with the wire format reads it."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pko.api import conditions

UTC = datetime.UTC


def _strptime(value: str) -> datetime.datetime:
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


@given(st.datetimes(min_value=datetime.datetime(1000, 1, 1), max_value=datetime.datetime(9999, 12, 31),
                    timezones=st.just(UTC)))
def test_a_written_time_reads_back_to_the_second(moment: datetime.datetime) -> None:
    assert conditions.parse_time(conditions.format_time(moment)) == moment.replace(microsecond=0)


@pytest.mark.parametrize("value", ["2026-1-5T10:00:00Z", "2026-12-06T9:05:07Z", "2026-12-06T10:00:00+00:00",
                                   "2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z", "2026-12-06T24:00:00Z",
                                   "2026-12-06 10:00:00Z", "2026-12-06T10:00:00.5Z", "tomorrow",
                                   "\uff12\uff10\uff12\uff16-12-06T10:00:00Z"])
def test_any_other_spelling_is_read_or_refused_as_strptime_does(value: str) -> None:
    try:
        expected: datetime.datetime | type[ValueError] = _strptime(value)
    except ValueError:
        expected = ValueError
    if expected is ValueError:
        with pytest.raises(ValueError, match=r"."):
            conditions.parse_time(value)
    else:
        assert conditions.parse_time(value) == expected


def test_empty_is_none() -> None:
    assert conditions.parse_time("") is None
    assert conditions.parse_time(None) is None
