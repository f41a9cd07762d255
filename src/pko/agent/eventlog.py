"""Following the CLI's ``--event-log`` file, so each engine event reaches the client as the engine wrote it.

The Automation API reads this same file (one JSON engine event per line) and turns it into typed objects; the agent
protocol instead streams the engine's JSON itself (a ``google.protobuf.Struct``), so we read the file directly. The
reader polls the file while the CLI runs and drains it once the CLI has exited, so no event is lost and the events
always precede the result.

It must never block the event loop for long (reads are small and local) and never log event contents (diagnostic
events can quote program output).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from google.protobuf import struct_pb2

log = logging.getLogger("pko.agent.events")


def to_struct(event: dict[str, Any]) -> struct_pb2.Struct:
    """An engine event as a protobuf ``Struct`` (numbers become doubles, as with Go's structpb)."""
    struct = struct_pb2.Struct()
    struct.update(event)
    return struct


def _parse_lines(lines: list[bytes]) -> list[dict[str, Any]]:
    events = []
    for line in lines:
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            log.error("skipping an engine event that is not valid JSON (%d bytes)", len(line))
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


async def follow(path: Path, finished: Callable[[], bool], poll_interval: float = 0.05
                 ) -> AsyncIterator[dict[str, Any]]:
    """Yield each event appended to `path` until `finished()` is true and the file is drained."""
    offset = 0
    pending = b""
    while True:
        done = finished()  # sampled before reading: whatever was written before exit is read below
        data = b""
        try:
            with path.open("rb") as handle:
                handle.seek(offset)
                data = handle.read()
        except FileNotFoundError:
            pass
        offset += len(data)
        *lines, pending = (pending + data).split(b"\n")
        for event in _parse_lines(lines):
            yield event
        if done:
            for event in _parse_lines([pending]):
                yield event
            return
        if not data:
            await asyncio.sleep(poll_interval)
