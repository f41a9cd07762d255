"""A file one worker thread writes while requests stream what it holds so far: an npm tree answered as it is built.

Why: the first pod of a new lockfile asked for its tree and waited for the whole build (fetch, check, repack: about
3 s for the Kubernetes SDK's 262 packages on a 2-core node) before receiving a byte, then unpacked it (another
1.4 s); a fleet's pods all waited the same way. Streamed, a pod unpacks the first packages while the last ones are
repacked.

The writer calls :meth:`Growing.wrote` from its thread (the event loop is woken once every
:data:`NOTIFY_EVERY` bytes, not per write) and :meth:`Growing.finish` on the loop once the file is complete or the
build failed; each :class:`Reader` opened the file while it had its temporary name and reads no further than what
the writer reported. A failed build is an :class:`Aborted` for every reader: the answer must end in an error the
client sees (a cut chunked body), never in a short tree that looks whole.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

#: How many bytes the writer adds between two wake-ups of the readers.
NOTIFY_EVERY = 1 << 18
#: The most one read hands to a response.
READ_SIZE = 1 << 18


class Aborted(Exception):
    """The file will not be complete: what the readers sent so far is not the whole of it."""


class Growing:
    """The progress of one file being written at `path`: how many bytes are there, and whether it is complete."""

    def __init__(self, path: Path, loop: asyncio.AbstractEventLoop) -> None:
        self.path = path
        self.size = 0
        self.done = False
        self.error: str | None = None
        self._loop = loop
        self._changed = asyncio.Event()
        self._reported = 0

    def wrote(self, size: int) -> None:
        """From the writer's thread: the file now holds `size` bytes (readers are woken every NOTIFY_EVERY)."""
        if size - self._reported >= NOTIFY_EVERY:
            self._reported = size
            self._loop.call_soon_threadsafe(self._grow, size)

    def finish(self, size: int, error: str | None = None) -> None:
        """On the loop: the file is complete at `size` bytes, or (`error`) will never be."""
        self.done = True
        self.error = error
        self._grow(size)

    def open(self) -> Reader:
        """A reader from the first byte. Call it on the loop before anything awaits: the file is renamed (and its
        name gone) in the same step that removes this object from the builds in progress."""
        return Reader(self)

    def _grow(self, size: int) -> None:
        self.size = max(self.size, size)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def changed(self) -> None:
        await self._changed.wait()


class Reader:
    """One request's view of a :class:`Growing` file, open from its creation so a rename cannot take it away."""

    def __init__(self, growing: Growing) -> None:
        self.growing = growing
        self._handle = growing.path.open("rb")

    async def chunks(self) -> AsyncIterator[bytes]:
        """The file's bytes as they come; :class:`Aborted` when the writer failed. Closes the file when done."""
        growing = self.growing
        offset = 0
        try:
            while True:
                if offset < growing.size:
                    data = self._handle.read(min(READ_SIZE, growing.size - offset))  # the page cache: no wait
                    if not data:
                        raise Aborted(f"{growing.path.name} is shorter than the {growing.size} bytes written")
                    offset += len(data)
                    yield data
                elif growing.done:
                    if growing.error is not None:
                        raise Aborted(growing.error)
                    return
                else:
                    await growing.changed()
        finally:
            self._handle.close()

    def close(self) -> None:
        self._handle.close()
