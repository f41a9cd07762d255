"""A file answered while a thread writes it: readers get every byte in order however the writes and wake-ups fall,
a reader opened before the file is renamed keeps reading it, and a failed writer is an error for every reader, not
a short file."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from pko.depcache import growing


def _write(building: growing.Growing, pieces: list[bytes], step: threading.Event) -> int:
    size = 0
    with building.path.open("wb", buffering=0) as out:
        for piece in pieces:
            out.write(piece)
            size += len(piece)
            building.wrote(size)
            step.wait(0.001)
    return size


async def _read(reader: growing.Reader) -> bytes:
    return b"".join([chunk async for chunk in reader.chunks()])


async def test_every_reader_gets_the_whole_file_whenever_it_joined(tmp_path: Path) -> None:
    pieces = [os.urandom(n) for n in (100, growing.NOTIFY_EVERY, 7, 3 * growing.NOTIFY_EVERY + 1, 512)] * 4
    path = tmp_path / "tmp-tree"
    path.touch()
    building = growing.Growing(path, asyncio.get_running_loop())
    early = building.open()
    writer = asyncio.create_task(asyncio.to_thread(_write, building, pieces, threading.Event()))
    while building.size < growing.NOTIFY_EVERY:  # one reader joins once bytes are there
        await building.changed()
    late = building.open()
    readers = asyncio.gather(_read(early), _read(late))
    size = await writer
    path.rename(tmp_path / "kept")  # as the store takes it: readers hold the file open
    building.finish(size)
    assert await readers == [b"".join(pieces)] * 2


async def test_a_failed_writer_is_an_error_for_every_reader(tmp_path: Path) -> None:
    path = tmp_path / "tmp-tree"
    path.write_bytes(b"x" * (2 * growing.NOTIFY_EVERY))
    building = growing.Growing(path, asyncio.get_running_loop())
    reader = building.open()
    building.wrote(2 * growing.NOTIFY_EVERY)
    received = bytearray()
    all_there = asyncio.Event()

    async def read() -> None:
        async for chunk in reader.chunks():
            received.extend(chunk)
            if len(received) == 2 * growing.NOTIFY_EVERY:
                all_there.set()
    task = asyncio.create_task(read())
    await all_there.wait()
    building.finish(2 * growing.NOTIFY_EVERY, error="the tree is over 100 bytes")
    with pytest.raises(growing.Aborted, match="over 100 bytes"):
        await task
