"""Free loopback ports for the processes the test bed starts.

`make test` runs several pytest sessions at once, each starting control planes, git servers, operators and agents
that listen on ports it picked ahead of time. The picker is the operator's own (:mod:`pko.runtime.ports`: at random
below the ephemeral range, checked free, and never handed out twice by one process within minutes), so the test bed
and the `local` runtime's agents of an in-process operator draw from one memory: a caller often picks several ports
before it starts the listener that binds them (an operator's health, metrics and file-server ports), and a port
picked a moment ago is still free to the bind check (fresh-clone CI: the same port for an operator's health probe and
its file server).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from pko.runtime.ports import free_port

__all__ = ["Server", "free_port", "start_on_free_port"]


class Server(Protocol):
    def stop(self) -> None: ...


S = TypeVar("S", bound=Server)


def start_on_free_port(launch: Callable[[int], S], answers: Callable[[S], bool], attempts: int = 5,
                       timeout: float = 15.0) -> S | None:
    """A server `launch(port)` started on a free port, once `answers(server)`; a server that does not answer within
    `timeout` (another process took the port between the pick and its bind, or it exited) is stopped and another
    port tried. None after `attempts` tries: the caller says why, with its server's log."""
    for _ in range(attempts):
        server = launch(free_port())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if answers(server):
                return server
            time.sleep(0.1)
        server.stop()
    return None
