"""Engine events are read from the CLI's event log as they are appended, and none is lost at the end."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from pko.agent import eventlog


async def test_follows_appends_and_drains_after_finish(tmp_path: Path) -> None:
    path = tmp_path / "eventlog.txt"
    finished = False
    seen: list[dict[str, object]] = []

    async def writer() -> None:
        nonlocal finished
        await asyncio.sleep(0.05)  # the file does not exist at first
        with path.open("w") as handle:
            handle.write(json.dumps({"sequence": 0, "preludeEvent": {}}) + "\n")
            handle.flush()
            await asyncio.sleep(0.1)
            handle.write('{"sequence": 1, "diagnos')  # a partial line...
            handle.flush()
            await asyncio.sleep(0.1)
            handle.write('ticEvent": {"message": "hi"}}\nnot json\n')
            handle.write(json.dumps({"sequence": 2, "cancelEvent": {}}))  # last line without newline
        finished = True

    task = asyncio.create_task(writer())
    async for event in eventlog.follow(path, lambda: finished, poll_interval=0.01):
        seen.append(event)
    await task
    assert [e["sequence"] for e in seen] == [0, 1, 2]
    assert seen[1] == {"sequence": 1, "diagnosticEvent": {"message": "hi"}}


def test_to_struct_keeps_the_json_shape() -> None:
    event = {"sequence": 3, "timestamp": 1700000000, "resOutputsEvent": {"metadata": {"urn": "u", "keys": ["a"],
                                                                                   "old": None}}}
    struct = eventlog.to_struct(event)
    assert struct["resOutputsEvent"]["metadata"]["urn"] == "u"
    assert struct["sequence"] == 3.0
