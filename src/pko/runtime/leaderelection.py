"""Lease leader election, decided by pure functions (client-go's ``leaderelection`` rules).

Only one operator replica may reconcile at a time: two would race on Updates and run ``pulumi up`` twice. The
replicas share a ``coordination.k8s.io/v1`` Lease (``operator.pulumi.com`` by default). The rules:

* a candidate takes the lease when there is none, when it is released (empty holder), or when the holder has
  not renewed it for ``leaseDurationSeconds`` — measured on the candidate's own clock from the moment it
  *observed* the current record, never from the record's timestamps (clocks of two machines differ);
* the holder renews every retry period and must stop leading once it failed to renew for ``renew_deadline``
  (shorter than the lease duration, so it stops before anyone may take over);
* on shutdown the holder releases the lease (holder cleared) so a successor need not wait.

This module decides; :mod:`pko.runtime.leader` does the I/O. Nothing here reads a clock or talks to the API.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from typing import Any

DEFAULT_LEASE_NAME = "operator.pulumi.com"


@dataclasses.dataclass(frozen=True)
class Timing:
    """The operator's ``--leader-election-lease-duration``, ``-renew-deadline`` and ``-retry-period``."""

    lease_duration: float = 60.0
    renew_deadline: float = 45.0
    retry_period: float = 10.0

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError("need lease duration > renew deadline > retry period > 0")


@dataclasses.dataclass(frozen=True)
class Record:
    """The leader-election fields of a Lease's spec."""

    holder: str = ""
    lease_duration: float = 0.0
    acquire_time: datetime.datetime | None = None
    renew_time: datetime.datetime | None = None
    transitions: int = 0


class Action(enum.Enum):
    ACQUIRE = "acquire"
    """Take the lease (create it, or take over a released or expired one)."""
    RENEW = "renew"
    """We hold it: bump the renew time."""
    WAIT = "wait"
    """Someone else holds a lease that has not expired."""


def decide(record: Record | None, identity: str, observed_at: float, now: float) -> Action:
    """What a candidate does, given the current record and when (on its monotonic clock) it first saw it."""
    if record is None:
        return Action.ACQUIRE
    if record.holder == identity:
        return Action.RENEW
    if not record.holder:
        return Action.ACQUIRE
    if now >= observed_at + record.lease_duration:
        return Action.ACQUIRE
    return Action.WAIT


def observed(previous: Record | None, previous_at: float, current: Record | None, now: float) -> float:
    """When the current record was first observed: ``now`` if it differs from the previous one."""
    return previous_at if current == previous else now


def next_record(record: Record | None, identity: str, action: Action, lease_duration: float,
                now: datetime.datetime) -> Record:
    """The record to write for ``action`` (ACQUIRE or RENEW)."""
    if action is Action.RENEW and record is not None:
        return dataclasses.replace(record, lease_duration=lease_duration, renew_time=now)
    if action is not Action.ACQUIRE:
        raise ValueError(f"nothing to write for {action}")
    transitions = 0 if record is None else record.transitions + (1 if record.holder != identity else 0)
    return Record(identity, lease_duration, now, now, transitions)


def released(record: Record, now: datetime.datetime) -> Record:
    """The record a leader writes when it steps down: no holder, so a successor acquires at once."""
    return Record("", 1.0, now, now, record.transitions)


def lost(last_renewed: float, now: float, timing: Timing) -> bool:
    """True once the holder went ``renew_deadline`` without a successful renewal (its own monotonic clock)."""
    return now - last_renewed >= timing.renew_deadline


# --- the Lease object ------------------------------------------------------------------------------------------

_MICRO_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"


def format_time(value: datetime.datetime) -> str:
    return value.astimezone(datetime.UTC).strftime(_MICRO_TIME)


def parse_time(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    text = value.replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(text)


def record_of(lease: dict[str, Any]) -> Record:
    spec = lease.get("spec") or {}
    return Record(
        holder=str(spec.get("holderIdentity") or ""),
        lease_duration=float(spec.get("leaseDurationSeconds") or 0),
        acquire_time=parse_time(spec.get("acquireTime")),
        renew_time=parse_time(spec.get("renewTime")),
        transitions=int(spec.get("leaseTransitions") or 0),
    )


def lease_spec(record: Record) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "holderIdentity": record.holder,
        "leaseDurationSeconds": max(1, round(record.lease_duration)),
        "leaseTransitions": record.transitions,
    }
    if record.acquire_time is not None:
        spec["acquireTime"] = format_time(record.acquire_time)
    if record.renew_time is not None:
        spec["renewTime"] = format_time(record.renew_time)
    return spec
