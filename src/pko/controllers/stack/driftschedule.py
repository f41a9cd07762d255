"""When a Stack's next drift check is due — pure: schedule, jitter, last check in; a time out.

Why a module of its own: the schedule is the part users reason about ("every 6h, spread over 30m"), so it is one
function with its rules written down and tested without an API server:

- ``interval``: the next check starts ``interval`` after the previous one started; the first one ``interval`` after
  the anchor (the Stack's last successful update). Every start is then delayed by the Stack's *offset*.
- ``cron`` (five fields, UTC): the next check starts at the first time of the expression after the previous start,
  delayed by the offset; the first one at the first time after the anchor.
- The offset is a fixed share of ``jitter`` computed from the Stack's UID (SHA-256, so it is the same in every
  operator replica and across restarts, and uniform over a fleet): Stacks created together check apart, and one
  Stack always checks at the same phase.

The API server refuses what its schema can express (pko.api.drift); :func:`parse` reports the rest precisely: a
reversed range (``30-10``, which cron implementations disagree about) and an expression that never fires
(``0 0 30 2 *``).

Must never: read the clock (callers pass the times) or do I/O.
"""

from __future__ import annotations

import datetime
import hashlib
import re
from dataclasses import dataclass

import croniter

from pko.api import drift as drift_api
from pko.api import durations

_CRON = re.compile(drift_api.CRON_RE)
_DURATION = re.compile(drift_api.DURATION_RE)
_NAMES = {name: number for number, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1)}
_NAMES.update({name: number for number, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))})
_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day-of-month", 1, 31), ("month", 1, 12), ("day-of-week", 0, 6))
# A check starts at most this far ahead: an expression with no time within it never fires (30 February).
_HORIZON = datetime.timedelta(days=5 * 366)


class ScheduleError(ValueError):
    """A schedule the API server accepted but that cannot run; the message names the field and the fault."""


@dataclass(frozen=True)
class Schedule:
    interval: float | None = None  # seconds
    cron: str | None = None
    jitter: float = 0.0  # seconds


def parse(spec: drift_api.DriftDetection) -> Schedule:
    """The schedule `spec` describes; ScheduleError with a precise message when it cannot run."""
    if (spec.interval is None) == (spec.cron is None):
        raise ScheduleError("spec.driftDetection: set exactly one of interval or cron")
    jitter = _duration("jitter", spec.jitter) if spec.jitter is not None else 0.0
    if spec.interval is not None:
        interval = _duration("interval", spec.interval)
        if interval < durations.parse(drift_api.MIN_INTERVAL):
            raise ScheduleError(f"spec.driftDetection.interval: {spec.interval!r} is shorter than "
                                f"{drift_api.MIN_INTERVAL}")
        return Schedule(interval=interval, jitter=jitter)
    assert spec.cron is not None
    _check_cron(spec.cron)
    return Schedule(cron=spec.cron.strip(), jitter=jitter)


def _duration(name: str, text: str) -> float:
    if not _DURATION.match(text):
        raise ScheduleError(f"spec.driftDetection.{name}: {text!r} {drift_api.DURATION_MESSAGE}")
    return durations.parse(text)


def _value(text: str) -> int:
    return _NAMES[text.lower()] if text.lower() in _NAMES else int(text)


def _check_cron(expression: str) -> None:
    if not _CRON.match(expression):
        raise ScheduleError(f"spec.driftDetection.cron: {expression!r}: {drift_api.CRON_MESSAGE}")
    if not expression.startswith("@"):
        for (name, first, last), field in zip(_FIELDS, expression.split(), strict=True):
            for element in field.split(","):
                low, _, high = element.partition("/")[0].partition("-")
                if high and _value(low) > _value(high):
                    raise ScheduleError(f"spec.driftDetection.cron: {expression!r}: the {name} range {low}-{high} "
                                        f"runs backwards; write it as two ranges: {low}-{last},{first}-{high}")
    start = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
    try:
        fires = croniter.croniter(expression, start).get_next(datetime.datetime)
    except (croniter.CroniterBadDateError, croniter.CroniterBadCronError, ValueError) as err:
        raise ScheduleError(f"spec.driftDetection.cron: {expression!r} never fires ({err})") from None
    if fires - start > _HORIZON:
        raise ScheduleError(f"spec.driftDetection.cron: {expression!r} never fires")


def offset(uid: str, jitter: float) -> float:
    """This Stack's fixed delay in [0, jitter): the top 53 bits of SHA-256(uid) (exactly a float in [0, 1)) as a
    fraction of `jitter`."""
    if jitter <= 0:
        return 0.0
    fraction = (int.from_bytes(hashlib.sha256(uid.encode()).digest()[:8], "big") >> 11) / 2.0**53
    return fraction * jitter


def next_check(schedule: Schedule, uid: str, *, last_check: datetime.datetime | None,
               anchor: datetime.datetime) -> datetime.datetime:
    """When the next check starts: after `last_check` (the previous check's start) when there is one, else after
    `anchor` (the Stack's last successful update)."""
    delay = datetime.timedelta(seconds=offset(uid, schedule.jitter))
    if schedule.interval is not None:
        return (last_check or anchor) + datetime.timedelta(seconds=schedule.interval) + delay
    assert schedule.cron is not None
    # The first time of the expression whose delayed start is after `since`: the previous check started at
    # (time + delay), so asking from (start - delay) gives the time after it.
    since = (last_check or anchor) - delay
    fire: datetime.datetime = croniter.croniter(schedule.cron, since).get_next(datetime.datetime)
    return fire + delay


def wait(schedule: Schedule, uid: str, *, last_check: datetime.datetime | None, anchor: datetime.datetime,
         now: datetime.datetime) -> float:
    """Seconds until the next check (0 when it is due)."""
    due = next_check(schedule, uid, last_check=last_check, anchor=anchor)
    return max(0.0, (due - now).total_seconds())
