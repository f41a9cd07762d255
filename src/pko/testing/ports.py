"""Free loopback ports for the processes the test bed starts.

`make test` runs several pytest sessions at once, each starting control planes, git servers, operators and agents
that listen on ports it picked ahead of time. A port the kernel hands out for ``bind(("127.0.0.1", 0))`` comes from
the ephemeral range, the same range every outgoing connection's local port comes from: between the pick and the
listener's own bind, any client in any of the sessions may take it. So ports are picked at random below that range
(and below Kubernetes' NodePort range), where only listeners live, and checked free by binding them. A port
handed out is not handed out again by this process for a while: a caller often picks several before it starts the
listener that binds them (an operator's health, metrics and file-server ports), and a port picked a moment ago is
still free to the bind check (fresh-clone CI: the same port for an operator's health probe and its file server).
"""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

LOW, HIGH = 20000, 29999  # under the kernel's ephemeral range (32768+) and the NodePort range (30000-32767)
REMEMBER = 600.0  # seconds a port handed out stays ours: the longest a caller takes from pick to listen, and more
_pick = random.SystemRandom()
_handed: dict[int, float] = {}  # port -> when this process handed it out
_lock = threading.Lock()


def _recently_handed(port: int, now: float) -> bool:
    at = _handed.get(port)
    return at is not None and now - at < REMEMBER


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, outside the range outgoing connections use, and not
    handed out by this process in the last :data:`REMEMBER` seconds."""
    with _lock:
        now = time.monotonic()
        for _ in range(200):
            port = _pick.randint(LOW, HIGH)
            if _recently_handed(port, now):
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed[port] = now
            return port
        for _ in range(20):  # a crowded range: let the kernel choose
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                chosen: int = sock.getsockname()[1]
            if not _recently_handed(chosen, now):
                _handed[chosen] = now
                return chosen
        raise OSError("no free loopback port: every pick was taken or handed out a moment ago")


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
