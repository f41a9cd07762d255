"""pko: how an agent the ``local`` runtime started tells it that its fetch is over and that it listens
(``agent serve --ready-fd N``).

Why: the runtime learnt both by looking — the fetch report file and a TCP connect to the agent's port every 0.1 s,
refused about ten times a start — so a start waited up to 0.1 s longer than it took, and each refused connect cost
the operator's event loop a socket, a failed connect and a timer. A pipe says it when it happens: the agent writes
one line a step to the write end it inherited, and the runtime waits on the read end and on the agent's exit. End
of stream or an exit before :data:`LISTENING` means the start failed (the exit code, fetch report and log say why).
The lines say nothing else; how the fetch went is in the fetch report (:mod:`pko.protocol.fetchrequest`).

A workspace pod has no such pipe: the kubelet's probes and the operator's connection do that job there.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

FETCHED = b"fetched\n"
LISTENING = b"listening\n"
#: the descriptor the agent fork server gives the pipe's write end in an agent it forks (after stdin, stdout, stderr)
FORKED_FD = 3


class Teller:
    """The agent's end: says each step once, and closes the pipe once it listens (nothing more will come)."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd
        if fd is not None:
            with contextlib.suppress(OSError):
                os.set_inheritable(fd, False)  # the Pulumi CLI and the program it runs never hold it

    def fetched(self) -> None:
        self._say(FETCHED)

    def listening(self) -> None:
        self._say(LISTENING)
        self.close()

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _say(self, line: bytes) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):  # a runtime that stopped listening: the agent goes on regardless
                os.write(self.fd, line)


class Lines:
    """The runtime's end: the lines of the (non-blocking) read end `fd`, waited for on the running event loop."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = b""
        self._ended = False
        os.set_blocking(fd, False)

    async def next(self) -> bytes:
        """The next whole line (with its newline), or ``b""`` once the write end is closed (what was left unsaid
        of a line is dropped)."""
        while b"\n" not in self._buffer:
            if self._ended:
                return b""
            await self._readable()
            try:
                chunk = os.read(self.fd, 256)
            except BlockingIOError:
                continue
            if not chunk:
                self._ended = True
                self._buffer = b""
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line + b"\n"

    async def _readable(self) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def heard() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_reader(self.fd, heard)
        try:
            await ready
        finally:
            loop.remove_reader(self.fd)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
