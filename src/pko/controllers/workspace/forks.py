"""The operator's side of the agent fork server (``python -m pko.cli.forkserver``; the wire:
:mod:`pko.protocol.spawn`): the `local` runtime's agents forked from one warm process instead of a Python start
each (about 0.25 CPU s a workspace saved: the agent's imports).

:class:`ForkServer` starts the server when the first agent is asked for, and again if it has died; it sends one
request at a time (the server answers in order). What it gives back, a :class:`ForkedAgent`, is the part of an
`asyncio.subprocess.Process` the runtime uses: its pid (its own session, so ``killpg`` reaches what it started), its
exit code once it has exited, and ``wait()``. The server reports each exit; should the server itself die, its
children die with it (their lifeline names it) and each is watched until it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any, Protocol

from pko.protocol import spawn

log = logging.getLogger(__name__)

MODULE = "pko.cli.forkserver"
CLOSE_GRACE = 10.0
GONE_POLL = 0.2  # how often a child of a dead server is looked for


class AgentProcess(Protocol):
    """What the runtime needs of an agent process (asyncio's `Process`, or a :class:`ForkedAgent`)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...


class SpawnFailed(Exception):
    """The server could not set the agent up (the message says why, never an environment value)."""


class ForkedAgent:
    """An agent process the fork server started."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited = asyncio.Event()

    async def wait(self) -> int:
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode

    def exited(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            self._exited.set()


class ForkServer:
    """Starts agents as forks of one warm process; `env` is the server's own environment (each agent gets the one
    its request names), `log_path` where the server's own output goes."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = env
        self.log_path = log_path
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)
        self._process: asyncio.subprocess.Process | None = None
        self._sock: socket.socket | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[ForkedAgent]] = {}
        self._children: dict[int, ForkedAgent] = {}
        self._watchers: set[asyncio.Task[None]] = set()

    async def spawn(self, argv: list[str], env: dict[str, str], cwd: str, output: int,
                    stdin: bytes | None = None, ready: int | None = None) -> ForkedAgent:
        """Fork `pko agent <argv>` in `cwd` with `env`, its stdout and stderr on `output` (a file descriptor), its
        stdin `stdin` (then closed) or nothing, and `ready` (a pipe's write end) as its descriptor
        :data:`pko.protocol.ready.FORKED_FD`. Raises :class:`SpawnFailed` when it cannot start."""
        loop = asyncio.get_running_loop()
        read_end, write_end = os.pipe() if stdin is not None else (os.open(os.devnull, os.O_RDONLY), -1)
        agent: ForkedAgent | None = None
        try:
            async with self._lock:
                sock = await self._running()
                request = spawn.Spawn(next(self._ids), argv, env, cwd)
                answer: asyncio.Future[ForkedAgent] = loop.create_future()
                self._pending[request.id] = answer
                payload = request.to_bytes()
                try:
                    await _send(sock, spawn.HEADER.pack(len(payload)),
                                [read_end, output, output, *([] if ready is None else [ready])])
                    await loop.sock_sendall(sock, payload)
                except OSError as err:
                    self._pending.pop(request.id, None)
                    raise SpawnFailed(f"the agent fork server is gone: {err}") from None
                os.close(read_end)
                read_end = -1
                agent = await answer
        finally:
            if read_end >= 0:
                os.close(read_end)
            if write_end >= 0 and agent is None:  # nothing will read it
                os.close(write_end)
        if stdin is not None:
            await asyncio.to_thread(_write_all, write_end, stdin)
        return agent

    @property
    def server_pid(self) -> int | None:
        """The running server's pid, if one runs."""
        return self._process.pid if self._process is not None and self._process.returncode is None else None

    async def close(self) -> None:
        """Stop the server (its children, if any are left, get their lifeline's SIGTERM)."""
        async with self._lock:
            await self._stop()

    # --- the server --------------------------------------------------------------------------------------------

    async def _running(self) -> socket.socket:
        if self._sock is not None and self._reader is not None and not self._reader.done():
            return self._sock
        await self._stop()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self.log_path.open("ab") as output:
                self._process = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", MODULE, "--fd", str(theirs.fileno()), " " * spawn.TITLE_ROOM,
                    env=self.env, pass_fds=[theirs.fileno()], stdin=asyncio.subprocess.DEVNULL,
                    stdout=output, stderr=asyncio.subprocess.STDOUT, start_new_session=True,
                )
        except (OSError, ValueError) as err:
            ours.close()
            raise SpawnFailed(f"could not start the agent fork server: {err}") from None
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours
        self._reader = asyncio.create_task(self._read(ours))
        log.info("agent fork server started (pid %d)", self._process.pid)
        return ours

    async def _stop(self) -> None:
        if self._reader is not None:  # first: a socket closed under a pending read would leave it registered
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        if self._sock is not None:  # the server's end of the stream: it exits
            self._sock.close()
            self._sock = None
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            try:
                async with asyncio.timeout(CLOSE_GRACE):
                    await process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()

    async def _read(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        buffered = b""
        try:
            while True:
                data = await loop.sock_recv(sock, 65536)
                if not data:
                    break
                buffered += data
                *lines, buffered = buffered.split(b"\n")
                for line in lines:
                    self._heard(json.loads(line))
        except (OSError, ValueError) as err:
            log.warning("agent fork server: %s", err)
        finally:
            self._lost()

    def _heard(self, message: dict[str, Any]) -> None:
        if "exit" in message:
            child = self._children.pop(int(message["exit"]), None)
            if child is not None:
                child.exited(int(message["code"]))
            return
        answer = self._pending.pop(int(message["id"]), None)
        if "pid" in message:
            child = self._children[int(message["pid"])] = ForkedAgent(int(message["pid"]))
            if answer is None or answer.done():  # the start was given up (cancelled): nobody would stop it
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.pid, signal.SIGTERM)
                return
            answer.set_result(child)
        elif answer is None or answer.done():
            return
        else:
            answer.set_exception(SpawnFailed(str(message.get("error", "refused"))))

    def _lost(self) -> None:
        """The server is gone: nothing pending will be answered, and its children's exits will not be told."""
        for answer in self._pending.values():
            if not answer.done():
                answer.set_exception(SpawnFailed("the agent fork server exited"))
        self._pending.clear()
        for child in self._children.values():
            task = asyncio.create_task(_until_gone(child))
            self._watchers.add(task)
            task.add_done_callback(self._watchers.discard)
        self._children.clear()


async def _send(sock: socket.socket, data: bytes, fds: list[int]) -> None:
    """`data` (a few bytes) with `fds` attached, on the non-blocking `sock`."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            sent = socket.send_fds(sock, [data], fds)
        except BlockingIOError:
            writable: asyncio.Future[None] = loop.create_future()
            loop.add_writer(sock, _settle, writable)
            try:
                await writable
            finally:
                loop.remove_writer(sock)
            continue
        if sent < len(data):
            await loop.sock_sendall(sock, data[sent:])
        return


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _write_all(fd: int, data: bytes) -> None:
    try:
        with contextlib.suppress(BrokenPipeError):  # it exited before it read: its exit says why
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


async def _until_gone(child: ForkedAgent) -> None:
    while not _gone(child.pid):  # noqa: ASYNC110 - nothing tells of a process that is not our child: look
        await asyncio.sleep(GONE_POLL)
    child.exited(-signal.SIGTERM)  # what its lifeline sent it when the server died
