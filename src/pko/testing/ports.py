"""Free loopback ports for the processes the test bed starts.

`make test` runs several pytest sessions at once, each starting control planes, git servers, operators and agents
that listen on ports it picked ahead of time. A port the kernel hands out for ``bind(("127.0.0.1", 0))`` comes from
the ephemeral range, the same range every outgoing connection's local port comes from: between the pick and the
listener's own bind, any client in any of the sessions may take it. So ports are picked at random below that range
(and below Kubernetes' NodePort range), where only listeners live, and checked free by binding them.
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

LOW, HIGH = 20000, 29999  # under the kernel's ephemeral range (32768+) and the NodePort range (30000-32767)
_pick = random.SystemRandom()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, outside the range outgoing connections use."""
    for _ in range(200):
        port = _pick.randint(LOW, HIGH)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # a crowded range: let the kernel choose
        sock.bind(("127.0.0.1", 0))
        chosen: int = sock.getsockname()[1]
        return chosen


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
