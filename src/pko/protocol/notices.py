"""Notices the agent adds to an operation's stream of engine events, for the operator to act on.

Why: the agent's wire contract is the Go agent's, so pko cannot add fields to its messages; but the stream of an
operation carries engine events as free-form structs, and a ``diagnosticEvent`` is what the Pulumi CLI itself uses
to tell a reader something. The agent sends one, marked by :data:`STALE_LOCK_RELEASED`, when it released a stack
lock whose holder was provably gone (:mod:`pko.agent.stalelocks`, PKO#736): the operator posts it as an event and a
line of the Update's status, and a Go operator reading the same stream only logs it, as any diagnostic.

Pure: dictionaries in and out.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

#: The beginning of a stale-lock notice's message.
STALE_LOCK_RELEASED = "pko: released the stale stack lock"


def stale_lock_released(lock: str, pid: object, host: str, now: datetime.datetime) -> dict[str, Any]:
    """The engine event (a warning diagnostic) that says the agent released `lock`, held by `pid` on `host`."""
    return {
        "sequence": 0,
        "timestamp": int(now.timestamp()),
        "diagnosticEvent": {
            "message": f"{STALE_LOCK_RELEASED} {lock}: its holder, pid {pid} on {host}, is gone\n",
            "color": "never",
            "severity": "warning",
        },
    }


def stale_lock_notice(event: Mapping[str, Any]) -> str | None:
    """The message of a stale-lock notice (without its newline), or None for any other event."""
    detail = event.get("diagnosticEvent")
    if not isinstance(detail, Mapping):
        return None
    message = detail.get("message")
    if isinstance(message, str) and message.startswith(STALE_LOCK_RELEASED):
        return message.strip()
    return None
