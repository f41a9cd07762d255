"""Fixtures of the hostile-input tests: a hung server (a TCP listener that accepts and never answers)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from types import TracebackType

import pytest


class SilentServer:
    """Accepts and holds connections until closed; ``port`` is where it listens."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._held.append(conn)

    def close(self) -> None:
        self._listener.close()
        for conn in self._held:
            conn.close()

    def __enter__(self) -> SilentServer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    """A hung git (or any TCP) server on loopback for the duration of a test."""
    with SilentServer() as server:
        yield server
