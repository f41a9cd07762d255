"""Running the Pulumi CLI from the agent's event loop: async, cancellable, with Ctrl-C semantics.

Why not ``pulumi.automation``: it is synchronous (``Popen`` plus reader threads) and offers no way to interrupt a
running command. Here each command is an asyncio subprocess in its own process group (so a terminal's Ctrl-C reaches
the CLI once, from us, and not twice); cancelling the awaiting task sends SIGINT — the CLI then cancels the engine,
saves its state and releases the stack lock — waits for it to exit, and only then re-raises. A second cancellation
(or the grace period running out) kills it, with the plugins it started (its process group). When a command has
exited, whatever it left in its group is killed too: no plugin outlives its CLI. :meth:`PulumiCLI.interrupt_all`
does the same for every running command when the agent shuts down.

It must never log the output of commands that may print secrets (callers pass ``log_output=False``), and never
block the event loop.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import logging
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pko.agent import orphans

log = logging.getLogger("pko.agent.pulumi")

DEFAULT_INTERRUPT_GRACE = 600.0  # the workspace pod's terminationGracePeriodSeconds


@dataclass(frozen=True)
class CommandResult:
    stdout: str
    stderr: str
    code: int


class CommandError(Exception):
    """The CLI exited with a non-zero code. ``str()`` reads like the Go Automation API's error."""

    def __init__(self, description: str, result: CommandResult):
        self.description = description
        self.result = result
        super().__init__(str(self))

    def __str__(self) -> str:
        r = self.result
        return f"{self.description}: exit status {r.code}\ncode: {r.code}\nstdout: {r.stdout}\nstderr: {r.stderr}\n"


#: The pids of the commands this process started, and when, the latest :data:`REMEMBERED_PIDS` (a stale lock's
#: holder is known as its own by them: pko.agent.stalelocks).
REMEMBERED_PIDS = 4096
_STARTED: collections.OrderedDict[int, datetime.datetime] = collections.OrderedDict()
#: How far a lock's time may lie before its command's start and still be that command's (clocks in seconds).
_SLACK = datetime.timedelta(seconds=2)


def _started(pid: int) -> None:
    _STARTED[pid] = datetime.datetime.now(datetime.UTC)
    _STARTED.move_to_end(pid)
    while len(_STARTED) > REMEMBERED_PIDS:
        _STARTED.popitem(last=False)


def started_here(pid: int, taken: datetime.datetime | None) -> bool:
    """Whether this process started the command `pid` that took a lock at `taken`: the latest command of that pid
    started before then (a pid is used again: in a container they count up from the same start, and a twin
    container elsewhere — the same Stack in another cluster — runs the same commands, so a pid alone would take a
    twin's live lock for one of ours)."""
    started = _STARTED.get(pid)
    return started is not None and taken is not None and started - _SLACK <= taken


class PulumiCLI:
    """The Pulumi CLI for one workspace directory and environment."""

    def __init__(self, workdir: Path, env: Mapping[str, str], binary: str = "pulumi",
                 interrupt_grace: float = DEFAULT_INTERRUPT_GRACE):
        self.workdir = workdir
        self.env = dict(env)
        self.binary = binary
        self.interrupt_grace = interrupt_grace
        self._running: set[asyncio.subprocess.Process] = set()
        #: told of every command that exits non-zero, checked or not (the workspace forgets a stack it is told is
        #: gone)
        self.on_failure: Callable[[CommandResult], None] | None = None

    @property
    def running(self) -> int:
        return len(self._running)

    async def run(self, args: Sequence[str], *, description: str = "failed to run command",
                  log_output: bool = True, check: bool = True,
                  env_overrides: Mapping[str, str] | None = None, program: str | None = None) -> CommandResult:
        """Run ``pulumi <args>`` (or `program`, another tool of the workspace, such as npm); raise
        :class:`CommandError` on a non-zero exit when `check`. `env_overrides` win over the workspace environment
        for this command only."""
        binary = program or self.binary
        proc, cancelled = await self._start(binary, args, {**self.env, **(env_overrides or {})})
        _started(proc.pid)
        self._running.add(proc)
        assert proc.stdout is not None
        assert proc.stderr is not None
        readers = asyncio.gather(
            _collect(proc.stdout, logging.INFO if log_output else None),
            _collect(proc.stderr, logging.WARNING if log_output else None),
        )
        try:
            try:
                if cancelled:
                    raise asyncio.CancelledError  # held while the command started; now it winds down like any
                stdout, stderr = await asyncio.shield(readers)
                code = await proc.wait()
            except asyncio.CancelledError:
                await self._wind_down(proc)
                raise
        finally:
            self._running.discard(proc)
            if proc.returncode is not None:
                _sweep_group(proc)
                # what the CLI orphaned (a language host it did not stop) was re-parented to the agent
                orphans.sweep({p.pid for p in self._running}, os.path.basename(binary))
            if not readers.done():
                readers.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await readers
        result = CommandResult(stdout, stderr, code)
        if code != 0 and self.on_failure is not None:
            self.on_failure(result)
        if check and code != 0:
            raise CommandError(description, result)
        return result

    async def _start(self, binary: str, args: Sequence[str],
                     env: Mapping[str, str]) -> tuple[asyncio.subprocess.Process, bool]:
        """Start a command, and whether the caller was cancelled meanwhile. A cancel is held until the command has
        started: asyncio's own answer to one that lands while it connects the pipes of a process it has already
        forked is to SIGKILL that process alone — no Ctrl-C, and what it has started yet (a plugin) outlives it."""
        spawn = asyncio.ensure_future(asyncio.create_subprocess_exec(
            binary, *args, cwd=self.workdir, env=dict(env), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, process_group=0,
        ))
        try:
            return await asyncio.shield(spawn), False
        except asyncio.CancelledError:
            try:
                return await asyncio.shield(spawn), True
            except asyncio.CancelledError:  # a second cancel kills, as in a wind-down: once it has started
                spawn.add_done_callback(_kill_started)
                raise
            except Exception:
                raise asyncio.CancelledError from None  # it never started: nothing to wind down

    async def _wind_down(self, proc: asyncio.subprocess.Process) -> None:
        """Ctrl-C the CLI and wait for it to finish cleanly; kill it on a second cancel or after the grace."""
        _signal(proc, signal.SIGINT)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), self.interrupt_grace)
        except (asyncio.CancelledError, TimeoutError):
            _signal(proc, signal.SIGKILL, group=True)
            await proc.wait()

    async def wind_down(self, timeout: float) -> int:
        """Wait until no CLI command runs any more (each interrupted one finishing its Ctrl-C: saving its state and
        releasing its lock), at most `timeout` seconds; then kill what still runs. How many had to be killed."""
        running = [proc for proc in self._running if proc.returncode is None]
        if running:
            await asyncio.wait([asyncio.ensure_future(proc.wait()) for proc in running], timeout=timeout)
        left = [proc for proc in running if proc.returncode is None]
        for proc in left:
            _signal(proc, signal.SIGKILL, group=True)
        return len(left)

    def interrupt_all(self) -> None:
        """Send Ctrl-C (SIGINT) to every running CLI process. Non-blocking."""
        for proc in list(self._running):
            _signal(proc, signal.SIGINT)

    def kill_all(self) -> None:
        for proc in list(self._running):
            _signal(proc, signal.SIGKILL, group=True)


def _signal(proc: asyncio.subprocess.Process, signum: int, *, group: bool = False) -> None:
    """Signal the CLI while it runs (`group`: with every process it started: its process group)."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group:
                os.killpg(proc.pid, signum)
            else:
                os.kill(proc.pid, signum)


def _kill_started(spawn: asyncio.Future[asyncio.subprocess.Process]) -> None:
    if not spawn.cancelled() and spawn.exception() is None:
        _signal(spawn.result(), signal.SIGKILL, group=True)


def _sweep_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL whatever is left of an exited CLI's process group. The CLI runs in a group of its own, which the
    plugins it starts (language hosts, providers) inherit; a CLI killed or cancelled at a bad moment may exit
    before it stops them, and they would outlive it (seen: a `pulumi-language-yaml` reparented to init after the
    agent was stopped mid-`up`). A group id stays reserved while any member lives, so this reaches only them."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def _collect(stream: asyncio.StreamReader, level: int | None) -> str:
    """All of a stream's text; complete lines are logged at `level` as they arrive (unless None)."""
    chunks: list[bytes] = []
    pending = b""
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            if level is not None and pending.strip():
                log.log(level, pending.decode(errors="replace").rstrip())
            return b"".join(chunks).decode(errors="replace")
        chunks.append(chunk)
        if level is None:
            continue
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            if line.strip():
                log.log(level, line.decode(errors="replace").rstrip())
