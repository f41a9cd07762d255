"""Resuming an `up` whose result the operator lost (pko addition to the protocol: `UpRequest.resume_after`).

Why: an operator that restarts while an `up` runs finds its Update still Progressing with nobody streaming it. The
Go operator marks it Aborted and the Stack runs the same `up` again — a second `up` for one generation. Often the
first one had finished in the backend and only its result was lost on the way. The operator then asks the agent
to resume instead: if the stack's latest history entry is an update that began after the second the lost Update
was started in and is over, that entry *is* the Update's result, and the agent returns it (with the stack's
current outputs) without running anything. Otherwise it runs nothing either and answers FAILED_PRECONDITION, and
the operator marks the Update Aborted, as the reference does (its Stack then retries).

Must never: take an entry that began before `after` or in its second (an earlier generation's update may have begun
then: the history has whole seconds), an entry still in progress,
or one of another kind (a refresh or destroy) for the lost `up`'s result. When in doubt, the reference's answer.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

FINISHED = ("succeeded", "failed")


def _time(text: Any) -> datetime.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def finished_since(history_json: str, after: datetime.datetime) -> bool:
    """Whether the latest entry of ``pulumi stack history --json --page-size 1`` is an update that began after
    `after`'s second (the history tells whole seconds only) and has ended.

    An entry that began in the same second as `after` is not taken: it may be the update before the lost one, which
    ended a moment before the operator started the lost Update. A fresh-clone chaos run did exactly that: a config
    change's Update started within the second its predecessor's `up` began, the operator was killed, and the resume
    answered with the predecessor's result, so the Stack was Ready at the new generation with the old outputs. Such
    an `up` runs again instead, as the reference runs it."""
    try:
        entries = json.loads(history_json or "[]") or []
    except ValueError:
        return False
    if not isinstance(entries, list) or not entries or not isinstance(entries[0], dict):
        return False
    entry = entries[0]
    began = _time(entry.get("startTime"))
    if entry.get("kind") != "update" or entry.get("result") not in FINISHED or began is None:
        return False
    return began.replace(microsecond=0) > after.replace(microsecond=0)
