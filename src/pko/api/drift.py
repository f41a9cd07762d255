"""pko: the Stack's ``spec.driftDetection`` and ``status.drift`` (docs/drift-detection.md).

Why: a drift check is a read-only ``pulumi preview --refresh`` run on a schedule; its result is reported on the
Stack (a ``Drifted`` condition, ``status.drift``) without touching ``status.lastUpdate``. The schedule is either an
``interval`` (a Go duration, like the other duration strings of the API) or a five-field ``cron`` expression (UTC),
plus an optional ``jitter`` that spreads a fleet's checks. The API server refuses what its schema can express
(format of each string, exactly one of interval/cron, bounds) with the messages below; the rest (a reversed range,
a date that never comes) is the Stack controller's to report.

The regular expressions are RE2 and Python ``re`` alike, so the CRD's CEL rules and the controller agree.

Must never: default anything (an absent ``driftDetection`` means no checks, exactly as with the Go operator), or
read the clock.
"""

from __future__ import annotations

from typing import Annotated

import pydantic

from pko.api.meta import Time, Wire
from pko.api.schema import MaxLength, Rule
from pko.api.update import DriftedResource

# A Go duration without a sign: one or more <number><unit> (`90s`, `1h30m`, `1.5h`).
DURATION_RE = r"^(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+$"
MIN_INTERVAL = "10s"
MAX_CRON_LENGTH = 100
MAX_STATUS_RESOURCES = 50

_STEP = "(/[1-9][0-9]{0,2})?"


def _field(number: str) -> str:
    """One cron field: `*`, a value or a range, each with an optional step, comma-separated."""
    element = f"([*]|({number})(-({number}))?){_STEP}"
    return f"{element}(,{element})*"


_MINUTE = "[0-5]?[0-9]"
_HOUR = "[01]?[0-9]|2[0-3]"
_DAY = "0?[1-9]|[12][0-9]|3[01]"
_MONTH = "0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)"
_WEEKDAY = "[0-7]|(?i:sun|mon|tue|wed|thu|fri|sat)"
MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
CRON_RE = ("^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|"
           + " +".join(_field(f) for f in (_MINUTE, _HOUR, _DAY, _MONTH, _WEEKDAY)) + ")$")

DURATION_MESSAGE = "must be a duration such as 30m, 6h or 1h30m: numbers with units (s, m, h), no sign"
CRON_MESSAGE = ("must be a cron expression of five fields, minute hour day-of-month month day-of-week (UTC), "
                "such as \"0 */6 * * *\", or one of " + ", ".join(MACROS))
ONE_OF_MESSAGE = "set exactly one of interval or cron"


def _duration_rule(name: str) -> Rule:
    return Rule(f"self.matches('{DURATION_RE}')", f"{name} {DURATION_MESSAGE}")


class DriftDetection(Wire):
    """pko: check the stack for drift on a schedule with a read-only `pulumi preview --refresh`; report it in the
    Drifted condition and status.drift; with remediate, run an update when drift is found."""

    __schema_markers__ = (
        Rule("has(self.interval) != has(self.cron)", ONE_OF_MESSAGE),
        Rule(f"!has(self.jitter) || !has(self.interval) || !self.jitter.matches('{DURATION_RE}') "
             f"|| !self.interval.matches('{DURATION_RE}') || duration(self.jitter) <= duration(self.interval)",
             "jitter must not be longer than interval"),
    )

    interval: Annotated[str, MaxLength(64), _duration_rule("interval"), Rule(
        f"!self.matches('{DURATION_RE}') || duration(self) >= duration('{MIN_INTERVAL}')",
        f"interval must be at least {MIN_INTERVAL}")] | None = pydantic.Field(
        None, description="Check this long after the previous check started (after the first successful update "
                          "for the first check), e.g. 1h.")
    cron: Annotated[str, MaxLength(MAX_CRON_LENGTH), Rule(f"self.matches('{CRON_RE}')", f"cron {CRON_MESSAGE}")
                    ] | None = pydantic.Field(
        None, description="Check at the times of this five-field cron expression, in UTC, e.g. \"0 3 * * *\".")
    jitter: Annotated[str, MaxLength(64), _duration_rule("jitter")] | None = pydantic.Field(
        None, description="Delay each check by a fixed share of this, computed from the Stack's UID, so a fleet "
                          "of Stacks does not check at once.")
    remediate: bool | None = pydantic.Field(
        None, description="Run an update (with refresh) when a check finds drift; otherwise only report it.")


class DriftCheck(Wire):
    """pko: one finished drift check."""

    name: str | None = pydantic.Field(None, description="The drift-check Update.")
    start_time: Time | None = None
    end_time: Time | None = None
    result: str | None = pydantic.Field(None, description="succeeded or failed.")
    message: str | None = None


class DriftStatus(Wire):
    """pko: the drift checks of the Stack (spec.driftDetection)."""

    current_check: str | None = pydantic.Field(None, description="The drift-check Update in flight.")
    last_check: DriftCheck | None = None
    resources: list[DriftedResource] | None = pydantic.Field(
        None, description=f"The drifted resources the last successful check found (at most "
                          f"{MAX_STATUS_RESOURCES}).")
    changes: dict[str, int] | None = pydantic.Field(
        None, description="How many drifted resources each operation would touch.")
    remediation: str | None = pydantic.Field(
        None, description="The update started to remediate the drift the last check found.")
