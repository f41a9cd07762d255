"""Process-wide log setup for `pko operator` and `pko dev`: structured lines, stdlib loggers underneath.

Library code logs through `logging` and passes context as `extra={...}` (the Update controller logs every
engine event with its namespace, stack and update) or binds it for a whole reconcile (`controller`, `namespace`,
`name`, `update`: :mod:`pko.runtime.logcontext`); this renders those fields as `key=value` on the console or as
one JSON object per line (`--zap-encoder json`), like the Go operator's zap logger.
"""

from __future__ import annotations

import logging
import sys

import structlog


def formatter(*, json_lines: bool = False) -> logging.Formatter:
    """One line per record: level, logger, message, the `extra` fields and the fields bound to the context."""
    # The console renderer prints a traceback itself; in JSON it becomes the `exception` string.
    rendering: list[structlog.typing.Processor] = (
        [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()] if json_lines
        else [structlog.dev.ConsoleRenderer(colors=False)]
    )
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.ExtraAdder(),
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *rendering],
    )


def configure(level: int, *, json_lines: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(json_lines=json_lines))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # One line per API request is noise at INFO; keep the HTTP clients' warnings and errors only.
    for noisy in ("httpx", "httpx2", "httpcore", "httpcore2"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
