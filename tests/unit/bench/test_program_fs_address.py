"""The local fleet bench gives every operator of one run the same Program file server address, as a deployed
operator's Service does: a restarted operator that advertised a new port rewrote every Program's status."""

from __future__ import annotations

import socket
from pathlib import Path

from bench import localfleet


def test_every_operator_of_a_run_listens_where_the_first_did(tmp_path: Path) -> None:
    first = localfleet.program_fs_address(tmp_path)
    assert localfleet.program_fs_address(tmp_path) == first
    host, port = first.rsplit(":", 1)
    assert host == "127.0.0.1"
    assert int(port) > 0
    with socket.socket() as server:  # free for the run's first operator to take
        server.bind((host, int(port)))
