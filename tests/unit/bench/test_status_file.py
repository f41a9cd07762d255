"""The bench's status files: rewritten in place (no rename each time), read back whole by another process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import proctree


def test_a_shorter_value_after_a_longer_one_reads_back_alone(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    status = proctree.StatusFile(path)
    assert proctree.read_json(path) is None  # nothing written yet
    status.write({"verified": 1000, "reconciles": {"stack-controller": 7000.0}})
    inode = path.stat().st_ino
    status.write({"verified": 3})
    assert proctree.read_json(path) == {"verified": 3}
    assert path.stat().st_ino == inode  # the same file, written over: no new file renamed into place
    status.close()


def test_an_empty_file_is_nothing_yet_and_a_file_that_never_parses_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    path.write_bytes(b"   ")
    assert proctree.read_json(path) is None
    path.write_bytes(b'{"verified": 1')
    with pytest.raises(RuntimeError, match="did not parse"):
        proctree.read_json(path)


def test_the_writer_keeps_one_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    status = proctree.StatusFile(path)
    before = len(os.listdir("/proc/self/fd"))
    for n in range(50):
        status.write({"verified": n})
    assert len(os.listdir("/proc/self/fd")) == before + 1
    status.close()
    assert len(os.listdir("/proc/self/fd")) == before
    assert proctree.read_json(path) == {"verified": 49}
