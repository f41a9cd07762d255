"""The fields every log line of a reconcile carries — ``controller``, ``namespace``, ``name``, and ``update`` where
one runs — bound once per reconcile in context variables instead of being formatted into each message.

Log calls stay plain stdlib ``logging``; :mod:`pko.cli.logs` merges the bound fields into each line (structlog's
contextvars support), as ``key=value`` on the console or as keys of the JSON object. asyncio copies the context
into every task, so work a reconcile starts (an Update running in the background) keeps its fields.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from structlog import contextvars


@contextlib.contextmanager
def scope(**fields: str) -> Iterator[None]:
    """Bind `fields` for the block; anything :func:`bind` adds inside is dropped again when the block ends."""
    saved = contextvars.get_contextvars()
    contextvars.bind_contextvars(**fields)
    try:
        yield
    finally:
        contextvars.clear_contextvars()
        contextvars.bind_contextvars(**saved)


def bind(**fields: str) -> None:
    """Add `fields` to the current scope (e.g. ``update=`` once a reconcile knows which Update runs)."""
    contextvars.bind_contextvars(**fields)


def fields() -> dict[str, Any]:
    """The fields bound in the current context."""
    return contextvars.get_contextvars()
