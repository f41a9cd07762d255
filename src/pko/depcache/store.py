"""The dependency cache's files on disk: content-addressed blobs, an index entry per request key, a size budget.

Why content addressing: a blob's name is the sha256 of its bytes, computed by the operator as it downloaded them,
so a file can only ever be stored under the digest of what the upstream sent, two keys with the same bytes share
one blob, and a reader can check what it got. Every write goes to a temporary file first and is renamed into
place, so a crash never leaves a half-written blob or entry behind. Past the byte budget the least recently used
entries go first (a blob goes with its last entry).

The index is held in memory too (read once at start): a lookup is a dict access, not a disk read. Must never
serve or keep a blob whose size differs from its entry.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass
class Entry:
    """What one request key was answered with."""

    key: str
    digest: str  # sha256 of the blob, hex
    size: int
    content_type: str
    fetched: float  # when the upstream sent it (seconds since the epoch)
    used: float  # when it was last served (kept in memory; written with the next change)
    base: str = ""  # the cache URL a rewritten document points at ("" when not rewritten)


class Store:
    """The cache directory `root`: ``blobs/<sha256>``, ``index/<sha256 of key>.json``, ``tmp/``."""

    def __init__(self, root: Path, max_bytes: int, clock: Callable[[], float] = time.time) -> None:
        if max_bytes <= 0:
            raise ValueError(f"the dependency cache needs a positive size, not {max_bytes}")
        self.root = root
        self.max_bytes = max_bytes
        self.clock = clock
        self._entries: dict[str, Entry] = {}
        for folder in ("blobs", "index", "tmp"):
            (root / folder).mkdir(parents=True, exist_ok=True, mode=0o700)
        for stale in (root / "tmp").iterdir():  # a download cut short by a restart
            stale.unlink(missing_ok=True)
        self._load()

    def _load(self) -> None:
        for path in (self.root / "index").glob("*.json"):
            try:
                entry = Entry(**json.loads(path.read_text()))
            except (OSError, ValueError, TypeError):
                log.warning("dropping unreadable dependency cache entry %s", path.name)
                path.unlink(missing_ok=True)
                continue
            if self._blob_ok(entry):
                self._entries[entry.key] = entry
            else:
                path.unlink(missing_ok=True)
        self._collect_blobs()

    def _index_path(self, key: str) -> Path:
        return self.root / "index" / f"{hashlib.sha256(key.encode()).hexdigest()}.json"

    def blob(self, entry: Entry) -> Path:
        return self.root / "blobs" / entry.digest

    def _blob_ok(self, entry: Entry) -> bool:
        try:
            return self.blob(entry).stat().st_size == entry.size
        except OSError:
            return False

    @property
    def size(self) -> int:
        """Bytes held in blobs (a blob shared by keys counted once)."""
        return sum({e.digest: e.size for e in self._entries.values()}.values())

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> Entry | None:
        """The entry for `key` when its blob is intact (one whose blob went missing is forgotten)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if not self._blob_ok(entry):
            self._forget(entry)
            return None
        entry.used = self.clock()
        return entry

    @contextlib.contextmanager
    def temporary(self) -> Iterator[Path]:
        """A fresh file under ``tmp/`` for a download, removed afterwards unless :meth:`put` took it."""
        handle, name = tempfile.mkstemp(dir=self.root / "tmp")
        os.close(handle)
        path = Path(name)
        try:
            yield path
        finally:
            path.unlink(missing_ok=True)

    def put(self, key: str, download: Path, digest: str, content_type: str, base: str = "") -> Entry:
        """Store `download` (whose sha256 is `digest`, as computed while it was written) as the answer to `key`."""
        size = download.stat().st_size
        blob = self.root / "blobs" / digest
        if blob.exists() and blob.stat().st_size == size:
            download.unlink()
        else:
            download.chmod(0o600)
            download.replace(blob)
        now = self.clock()
        entry = Entry(key, digest, size, content_type, fetched=now, used=now, base=base)
        self._write_index(entry)
        self._entries[key] = entry
        self._evict(keep=key)
        return entry

    def _write_index(self, entry: Entry) -> None:
        handle, name = tempfile.mkstemp(dir=self.root / "tmp")
        with os.fdopen(handle, "w") as out:
            json.dump(asdict(entry), out)
        Path(name).replace(self._index_path(entry.key))

    def _forget(self, entry: Entry) -> bool:
        """Drop `entry`; True when its blob went with it (no other entry shares it)."""
        self._entries.pop(entry.key, None)
        self._index_path(entry.key).unlink(missing_ok=True)
        if any(e.digest == entry.digest for e in self._entries.values()):
            return False
        self.blob(entry).unlink(missing_ok=True)
        return True

    def _evict(self, keep: str) -> None:
        """Forget the least recently used entries (never `keep`) until the blobs fit the budget."""
        total = self.size
        for entry in sorted(self._entries.values(), key=lambda e: e.used):
            if total <= self.max_bytes:
                return
            if entry.key != keep:
                log.info("dependency cache over %d bytes: dropping %s", self.max_bytes, entry.key)
                if self._forget(entry):
                    total -= entry.size

    def _collect_blobs(self) -> None:
        """Remove blobs no entry names (left by a crash between a blob's rename and its index write)."""
        named = {e.digest for e in self._entries.values()}
        for blob in (self.root / "blobs").iterdir():
            if blob.name not in named:
                blob.unlink(missing_ok=True)
