"""The dependency cache's store: content-addressed blobs, entries that survive a restart, least recently used
entries dropped past the budget, and nothing half-written or mismatched ever served."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pko.depcache.store import Store


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1
        return self.now


def _put(store: Store, key: str, data: bytes) -> None:
    with store.temporary() as download:
        download.write_bytes(data)
        store.put(key, download, hashlib.sha256(data).hexdigest(), "application/octet-stream")


def test_blobs_are_named_by_their_digest_and_shared_by_keys(tmp_path: Path) -> None:
    store = Store(tmp_path, 1 << 20)
    _put(store, "npm/a", b"same bytes")
    _put(store, "npm/b", b"same bytes")
    a, b = store.get("npm/a"), store.get("npm/b")
    assert a is not None
    assert b is not None
    assert a.digest == b.digest == hashlib.sha256(b"same bytes").hexdigest()
    assert store.blob(a).read_bytes() == b"same bytes"
    assert [p.name for p in (tmp_path / "blobs").iterdir()] == [a.digest]
    assert store.size == len(b"same bytes")
    assert list((tmp_path / "tmp").iterdir()) == []  # the download was taken


def test_entries_survive_a_restart_and_leftovers_are_cleaned(tmp_path: Path) -> None:
    store = Store(tmp_path, 1 << 20)
    _put(store, "plugins/x", b"plugin")
    (tmp_path / "tmp" / "cut-short").write_bytes(b"half a download")
    (tmp_path / "blobs" / ("0" * 64)).write_bytes(b"orphan")  # renamed, but its entry was never written
    (tmp_path / "index" / "garbage.json").write_text("{not json")
    again = Store(tmp_path, 1 << 20)
    entry = again.get("plugins/x")
    assert entry is not None
    assert again.blob(entry).read_bytes() == b"plugin"
    assert list((tmp_path / "tmp").iterdir()) == []
    assert not (tmp_path / "blobs" / ("0" * 64)).exists()
    assert not (tmp_path / "index" / "garbage.json").exists()
    assert len(again) == 1


def test_an_entry_whose_blob_changed_size_or_vanished_is_forgotten(tmp_path: Path) -> None:
    store = Store(tmp_path, 1 << 20)
    _put(store, "go/a.zip", b"module zip")
    _put(store, "go/b.zip", b"other zip")
    a, b = store.get("go/a.zip"), store.get("go/b.zip")
    assert a is not None
    assert b is not None
    store.blob(a).write_bytes(b"truncated")
    store.blob(b).unlink()
    assert store.get("go/a.zip") is None
    assert store.get("go/b.zip") is None
    assert len(store) == 0


def test_least_recently_used_entries_go_first_past_the_budget(tmp_path: Path) -> None:
    store = Store(tmp_path, 25, clock=Clock())
    _put(store, "old", b"a" * 10)
    _put(store, "used", b"b" * 10)
    assert store.get("old") is not None  # read again: now the most recently used
    _put(store, "new", b"c" * 10)  # 30 bytes > 25: the least recently used goes
    assert store.get("used") is None
    assert store.get("old") is not None
    assert store.get("new") is not None
    _put(store, "huge", b"d" * 100)  # larger than the budget on its own: kept (it is being served), others go
    assert store.get("huge") is not None
    assert len(store) == 1


def test_a_size_of_zero_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="positive size"):
        Store(tmp_path, 0)
