"""A git server that accepts the connection and never answers costs a bounded time, on every transport.

Real dulwich clients against a real listening socket on loopback; each call must fail with a GitError within a few
timeouts rather than hang (the Stack controller's worker and the agent's init would otherwise wait forever).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from pko.sources import git

TIMEOUT = 1.0


@pytest.mark.parametrize("scheme", ["http", "git", "ssh"])
def test_checkout_from_a_silent_server_fails_in_bounded_time(scheme: str, silent_server: Any,
                                                              tmp_path: Path) -> None:
    if scheme == "ssh":  # `make tools` installs openssh-client (tools/debian-packages.sh)
        assert shutil.which("ssh"), "no ssh client on this machine: run `make tools` to install openssh-client"
    url = {"http": f"http://127.0.0.1:{silent_server.port}/repo.git", "git": f"git://127.0.0.1:{silent_server.port}/repo.git",
           "ssh": f"ssh://git@127.0.0.1:{silent_server.port}/repo.git"}[scheme]
    started = time.monotonic()
    with pytest.raises(git.GitError, match="unable to list the refs"):
        git.checkout(url, "main", tmp_path / "out", timeout=TIMEOUT)
    assert time.monotonic() - started < 10 * TIMEOUT + 5
