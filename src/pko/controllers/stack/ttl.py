"""Stacks with a time to live (pko `spec.ttl`, docs/ttl.md) — pure.

Why: review environments should clean up after themselves. A Stack whose TTL has passed is deleted by the operator,
and its deletion destroys the stack whatever `destroyOnFinalize` says: the operator first marks the Stack with the
`pko.pulumi.com/expired` annotation (so a deletion is known to be the TTL's even after a restart, and a person
deleting the Stack early keeps the meaning `destroyOnFinalize` gives), then deletes it. The finalizer then runs the
destroy, retried with backoff like any failed destroy, and marks that destroy Update `pko.pulumi.com/expect-empty`:
the Update controller fails it unless the stack holds no resource afterwards, so the Stack goes only when nothing
is left behind.

The TTL counts from the Stack's creation. A suspended Stack does not expire until it is resumed; destroy protection
applies to the TTL's destroy as to any other (the expired Stack waits for its confirmation).

Must never: read the clock (callers pass the time) or do I/O.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from pko.api import conditions, durations, names
from pko.api import stack as stack_api

EVENT_EXPIRED = "StackExpired"


@dataclass(frozen=True)
class Expiry:
    """What a Stack's TTL asks for now: nothing (no TTL, or it cannot be read), a look in `wait` seconds, or
    `expired` (delete it)."""

    at: datetime.datetime | None = None
    wait: float | None = None
    expired: bool = False


def expires_at(stack: stack_api.Stack) -> datetime.datetime | None:
    """Creation time plus `spec.ttl`; None without a TTL or a creation time (the API server admits only good
    durations, so a bad one is treated as none)."""
    ttl = stack_api.spec_of(stack).ttl
    created = conditions.parse_time(stack.metadata.creation_timestamp)
    if not ttl or created is None:
        return None
    try:
        seconds = durations.parse(ttl)
    except ValueError:
        return None
    if seconds <= 0:
        return None
    return created + datetime.timedelta(seconds=seconds)


def plan(stack: stack_api.Stack, now: datetime.datetime) -> Expiry:
    """The TTL's verdict for a Stack that is neither deleting nor suspended (the caller checks both)."""
    at = expires_at(stack)
    if at is None:
        return Expiry()
    left = (at - now).total_seconds()
    if left <= 0:
        return Expiry(at=at, expired=True)
    return Expiry(at=at, wait=left)


def marked(stack: stack_api.Stack) -> bool:
    """The operator found the TTL passed: deleting this Stack destroys it. Only a mark made for this very object
    counts (its time not before the object's creation): a Stack restored from a backup with an old mark is a new
    object, deleted as `destroyOnFinalize` says until its own TTL passes."""
    value = (stack.metadata.annotations or {}).get(names.ANNOTATION_EXPIRED)
    when = conditions.parse_time(value) if value else None
    created = conditions.parse_time(stack.metadata.creation_timestamp)
    return when is not None and (created is None or when >= created)


def destroys_on_finalize(stack: stack_api.Stack) -> bool:
    """Deleting the Stack destroys its stack: `destroyOnFinalize`, or an expired TTL."""
    return bool(stack_api.spec_of(stack).destroy_on_finalize) or marked(stack)


def expired_message(stack: stack_api.Stack, at: datetime.datetime) -> str:
    spec = stack_api.spec_of(stack)
    return (f"the Stack's ttl ({spec.ttl}) passed at {conditions.format_time(at)}: destroying the stack, then "
            "deleting the Stack")


def sooner(wait: float | None, other: float | None) -> float | None:
    """The earlier of two requeue delays (None: no requeue)."""
    if wait is None:
        return other
    if other is None:
        return wait
    return min(wait, other)
