"""The test bed's package mirror over a real socket: a client that drops its connection (the operator's dependency
cache closing an idle keep-alive connection, with a reset) costs no traceback in the test's or benchmark's output,
and the mirror goes on serving."""

from __future__ import annotations

import socket
import struct
import time
import urllib.error
import urllib.request

import pytest

from pko.testing import mirror


def test_a_reset_connection_prints_nothing_and_the_mirror_keeps_serving(capfd: pytest.CaptureFixture[str]) -> None:
    with mirror.running() as server:
        for _ in range(3):
            client = socket.create_connection((server.host, server.port))
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close sends RST
            client.sendall(b"GET /plugins/")  # a request line the server is still reading
            time.sleep(0.05)
            client.close()
        time.sleep(0.3)  # the server's threads have met the resets
        with pytest.raises(urllib.error.HTTPError) as refused:  # the mirror still answers
            urllib.request.urlopen(f"http://{server.host}:{server.port}/plugins/absent.tar.gz", timeout=5)
        assert refused.value.code == 404
    assert "Traceback" not in capfd.readouterr().err
