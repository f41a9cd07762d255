"""The agent fork server of the `local` runtime: one Python process that has imported the agent, forking a copy of
itself for each workspace's ``agent serve`` (the wire: :mod:`pko.protocol.spawn`).

Why: a new agent process spent about 0.25 CPU s importing what it needs before it did anything, and a pool of
workspaces turning over a fleet starts one per Stack; a fork of a process that has imported it all costs
milliseconds. Everything the agent reads from its environment it reads at run time, after the fork (the child's
environment is replaced first), and nothing here starts a thread or an event loop before forking (grpc starts its
threads with its first server, in the child).

A child is what ``pko agent <argv>`` would be, exec'd by the operator: its own session, the request's stdin, stdout,
stderr (and ready pipe, as descriptor 3), working directory and environment, its argv shown in /proc/<pid>/cmdline
(written over the room this server's own command line keeps for it), and its life tied to this server's
(``$PKO_AGENT_PARENT_PID`` names this process; this process's own is tied to the operator's): an operator that dies
takes the server and so every agent with it. A request this server cannot set up (a working directory that is not
there) is answered with the reason and nothing runs.

Must never: log or write a request's environment (it holds the workspace's secrets), or let a child return into
this server's loop (it leaves by ``os._exit`` whatever happens).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import fcntl
import gc
import importlib
import os
import selectors
import signal
import socket
import sys
import traceback
from collections.abc import Sequence

from pko.agent import lifeline
from pko.protocol import spawn

#: what `agent serve` imports, imported once here (each pulls in the rest: grpc, protobuf, dulwich, yaml, asyncio)
PRELOAD = (
    "pko.cli.agent", "pko.agent.servecmd", "pko.agent.service", "pko.agent.grpcserver", "pko.agent.auth",
    "pko.agent.initcmd", "pko.agent.termination", "pko.protocol.fetchrequest", "pko.sources.git",
    "pko.sources.flux", "pko.sources.untar",
)
COMMAND = ("python", "-m", "pko", "agent")  # how a child's command line begins (what an exec'd agent shows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pko.cli.forkserver")
    parser.add_argument("--fd", type=int, required=True, help="the socket the operator talks on")
    parser.add_argument("room", nargs="?", default="", help="command-line room for the children's argv")
    args = parser.parse_args(argv)
    lifeline.hold()  # an operator that dies takes this server with it (and its children with it)
    for module in PRELOAD:
        importlib.import_module(module)
    gc.freeze()  # what is imported stays in pages the children share: a collection in a child never touches them
    with socket.socket(fileno=args.fd) as sock, contextlib.suppress(BrokenPipeError, ConnectionResetError):
        Server(sock).serve()  # returns, or the operator's end breaks, when the operator has gone
    return 0


class Server:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.children: set[int] = set()

    def serve(self) -> None:
        """Answer requests until the operator closes its end; report each child's exit as it happens."""
        wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wake-up fd hears of each exit
        signal.set_wakeup_fd(wake_write)
        with selectors.DefaultSelector() as selector:
            selector.register(self.sock, selectors.EVENT_READ)
            selector.register(wake_read, selectors.EVENT_READ)
            while True:
                for key, _ in selector.select():
                    if key.fileobj is self.sock:
                        if not self._answer():
                            return
                    else:
                        with contextlib.suppress(BlockingIOError):
                            while os.read(wake_read, 512):
                                pass
                self._reap()

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children.discard(pid)
            self.sock.sendall(spawn.exited(pid, os.waitstatus_to_exitcode(status)))

    def _answer(self) -> bool:
        """Read one request and fork for it; False when the operator has gone."""
        received = _receive(self.sock)
        if received is None:
            return False
        data, fds = received
        try:
            try:
                request = spawn.Spawn.from_bytes(data)
            except ValueError as err:
                print(f"forkserver: {err}", file=sys.stderr, flush=True)
                return False  # not our operator talking: nothing more it says can be trusted
            if len(fds) not in (spawn.FDS, spawn.MAX_FDS):
                self.sock.sendall(spawn.refused(
                    request.id, f"expected {spawn.FDS} or {spawn.MAX_FDS} file descriptors, got {len(fds)}"))
                return True
            self.sock.sendall(self._fork(request, fds))
            return True
        finally:
            for fd in fds:
                os.close(fd)

    def _fork(self, request: spawn.Spawn, fds: list[int]) -> bytes:
        sys.stdout.flush()
        sys.stderr.flush()
        error_read, error_write = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(error_read)
            _child(request, fds, error_write)
        os.close(error_write)
        with os.fdopen(error_read, "rb") as errors:
            problem = errors.read().decode(errors="replace")
        if problem:
            os.waitpid(pid, 0)
            return spawn.refused(request.id, problem)
        self.children.add(pid)
        return spawn.started(request.id, pid)


def _receive(sock: socket.socket) -> tuple[bytes, list[int]] | None:
    """One request: its bytes and the descriptors sent with its header; None at the end of the stream."""
    header, fds, _, _ = socket.recv_fds(sock, spawn.HEADER.size, spawn.MAX_FDS + 1)
    while header and len(header) < spawn.HEADER.size:
        more = sock.recv(spawn.HEADER.size - len(header))
        if not more:
            break
        header += more
    if len(header) < spawn.HEADER.size:
        for fd in fds:
            os.close(fd)
        return None
    (size,) = spawn.HEADER.unpack(header)
    if size > spawn.MAX_REQUEST:
        for fd in fds:
            os.close(fd)
        return b"", []  # refused as not JSON: the stream cannot be read past it
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            for fd in fds:
                os.close(fd)
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks), fds


def _child(request: spawn.Spawn, fds: list[int], error_write: int) -> None:
    code = 1
    try:
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            if error_write < len(fds):  # never where a request's descriptor goes
                error_write = fcntl.fcntl(error_write, fcntl.F_DUPFD_CLOEXEC, len(fds))
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            # nothing of this server's stays open in the agent (its socket, its selector, the other requests' fds)
            os.closerange(len(fds), error_write)
            os.closerange(error_write + 1, os.sysconf("SC_OPEN_MAX"))
            os.setsid()
            os.chdir(request.cwd)
        except OSError as err:
            os.write(error_write, str(err).encode())
            os._exit(127)
        env = dict(request.env)
        if lifeline.PARENT_ENV in env:  # the operator asked for a lifeline: this server is the parent now
            env[lifeline.PARENT_ENV] = str(os.getppid())
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [*COMMAND, *request.argv]
        show_title(sys.argv)
        os.close(error_write)
        from pko.cli import agent as cli_agent

        code = cli_agent.main(request.argv)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # whatever it is, the child reports it and leaves here
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def show_title(argv: list[str]) -> bool:
    """Write `argv` over this process's command line (/proc/self/cmdline), in the room the server's own command line
    keeps; False where that cannot be done (no /proc, a kernel that refuses): only what `ps` shows is lost."""
    try:
        fields = open("/proc/self/stat", "rb").read().rsplit(b")", 1)[1].split()  # noqa: SIM115
        start, end = int(fields[45]), int(fields[46])  # arg_start and arg_end: fields 48 and 49 of proc(5)
        with open("/proc/self/mem", "r+b", buffering=0) as memory:
            memory.seek(start)
            memory.write(spawn.title(argv, end - start))
    except (OSError, ValueError, IndexError):
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
