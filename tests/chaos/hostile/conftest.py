"""Fixtures of the hostile-input tests: a hung server (a TCP listener that accepts and never answers), and pko's
operator with a catcher of logged tracebacks for the fuzzed-spec tests."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import TracebackType

import pytest

from pko.testing import controlplane, operator

from . import fuzzing


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


@pytest.fixture
def tracebacks() -> Iterator[fuzzing.Tracebacks]:
    """Every log record with an exception attached, for the duration of a test."""
    handler = fuzzing.Tracebacks()
    logging.getLogger().addHandler(handler)
    yield handler
    logging.getLogger().removeHandler(handler)


@pytest.fixture
async def fuzz_operator(cluster: controlplane.ControlPlane, namespace: str, tmp_path: Path,
                        pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
                        ) -> AsyncIterator[operator.Operator]:
    """pko's operator in this process on the `local` runtime, limited to the test's namespace, agents under
    `tmp_path/workspaces`."""
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    async with operator.running(cluster.kubeconfig, tmp_path / "workspaces", namespace=namespace, git_timeout=3.0,
                                workers=4) as op:
        yield op
