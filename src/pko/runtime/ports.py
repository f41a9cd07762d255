"""Loopback ports for the listeners this process starts: the `local` runtime's agents, and the test bed's servers.

A port the kernel hands out for ``bind(("127.0.0.1", 0))`` comes from the ephemeral range, the same range every
outgoing connection's local port comes from; and a port checked free by binding it is free again the moment the
check's socket closes. Between that pick and the listener's own bind (an agent process takes most of a second to
start) another start may be handed the same port, or any client take it. So ports are picked at random below the
ephemeral range (and below Kubernetes' NodePort range), where only listeners live, checked free by binding them, and
a port handed out is not handed out again by this process for :data:`REMEMBER` seconds. One picker per process: the
operator's `local` runtime and the test bed that runs it in-process share the memory of what was handed out.
"""

from __future__ import annotations

import random
import socket
import threading
import time

LOW, HIGH = 20000, 29999  # under the kernel's ephemeral range (32768+) and the NodePort range (30000-32767)
REMEMBER = 600.0  # seconds a port handed out stays its caller's: the longest a caller takes from pick to listen
_pick = random.SystemRandom()
_handed: dict[int, float] = {}  # port -> when this process handed it out
_lock = threading.Lock()


def _forget_old(now: float) -> None:
    """Drop what was handed out :data:`REMEMBER` seconds ago or more: what stays in `_handed` is recent."""
    for port in [port for port, at in _handed.items() if now - at >= REMEMBER]:
        del _handed[port]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, outside the range outgoing connections use, and not
    handed out by this process in the last :data:`REMEMBER` seconds."""
    with _lock:
        now = time.monotonic()
        _forget_old(now)
        for _ in range(200):
            port = _pick.randint(LOW, HIGH)
            if port in _handed:
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
            if chosen not in _handed:
                _handed[chosen] = now
                return chosen
        raise OSError("no free loopback port: every pick was taken or handed out a moment ago")
