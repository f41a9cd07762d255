"""Go `time.Duration` strings (`90s`, `1h30m`, `24h`, `1.5h`, `300ms`), as Update `ttlAfterCompleted` and
prerequisite `succeededWithinDuration` carry them.

Pure. Must never accept something Go's `time.ParseDuration` rejects: a value that works here must work there.
"""

from __future__ import annotations

import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_MAX_NANOSECONDS = 2**63 - 1


def parse(text: str) -> float:
    """Seconds in `text`; ValueError for anything `time.ParseDuration` would refuse.

    As in Go: at most one leading sign, no whitespace anywhere, ``0`` is the only value without a unit, and the
    total must fit in an int64 of nanoseconds (about 292 years).
    """
    value = text
    sign = 1.0
    if value[:1] in ("+", "-"):
        sign = -1.0 if value[0] == "-" else 1.0
        value = value[1:]
    if value == "0":
        return 0.0
    if not value:
        raise ValueError(f"invalid duration {text!r}")
    total, pos = 0.0, 0
    while pos < len(value):
        match = _PART.match(value, pos)
        if match is None:
            raise ValueError(f"invalid duration {text!r}")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if total * 1e9 > _MAX_NANOSECONDS:
        raise ValueError(f"invalid duration {text!r}")
    return sign * total


def format_seconds(seconds: float) -> str:
    """Go's `Duration.String()` for whole and fractional seconds: `1h2m3s`, `4m0s`, `1.5s`, `0s`."""
    if seconds == 0:
        return "0s"
    negative = seconds < 0
    seconds = abs(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    secs_text = f"{secs:.9f}".rstrip("0").rstrip(".") + "s"
    text = (f"{int(hours)}h" if hours else "") + (f"{int(minutes)}m" if hours or minutes else "") + secs_text
    return ("-" if negative else "") + text
