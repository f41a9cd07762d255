"""The operator's channel to a workspace agent redials quickly while the agent is not listening yet: a pod is dialled
as soon as it runs, and gRPC's default reconnect backoff (1 s, growing 1.6x) made every Stack of a fleet wait for
the connect timeout (the first side-by-side benchmark). Real gRPC against a real TCP listener that refuses the
handshake (accepts and closes), counting how often the channel comes back."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import threading
import time

from pko.controllers import connect

WINDOW = 2.5


def _count_connects(listener: socket.socket, stop: threading.Event, seen: list[float]) -> None:
    listener.settimeout(0.05)
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        seen.append(time.monotonic())
        conn.close()


async def test_a_dial_to_an_agent_not_ready_yet_is_retried_within_half_a_second() -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    stop, seen = threading.Event(), []
    counter = threading.Thread(target=_count_connects, args=(listener, stop, seen), daemon=True)
    counter.start()
    channel = connect.open_channel(f"127.0.0.1:{port}")
    try:
        start = time.monotonic()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(channel.channel_ready(), WINDOW)
        assert time.monotonic() - start >= WINDOW - 0.1  # never ready: the listener speaks no HTTP/2
    finally:
        await channel.close(None)
        stop.set()
        counter.join(2)
        listener.close()
    gaps = [b - a for a, b in itertools.pairwise(seen)]
    # the default backoff dials 3 times in 2.5 s (0, ~1, ~2.6 s); ours at least every half second
    assert len(seen) >= 5, f"only {len(seen)} dials in {WINDOW}s: gaps {gaps}"
    assert max(gaps) < 0.9, gaps
