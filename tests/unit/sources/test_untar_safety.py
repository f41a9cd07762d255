"""Untrusted tarballs cannot write outside the target, link outside it, or exceed the size cap."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from pko.sources import untar


@pytest.fixture(autouse=True, params=["data-filter", "legacy"])
def python_filters(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rule holds on a Python with tarfile's `data` filter (>= 3.11.4) and on one without it (Debian
    bookworm's 3.11.2, which the agent executable bundles when built there)."""
    if request.param == "legacy":
        monkeypatch.setattr(untar, "HAS_DATA_FILTER", False)


def tgz(*entries: tuple[str, str, str | bytes]) -> io.BytesIO:
    """A .tar.gz of (kind, name, content-or-link-target) entries; kind is file, dir, symlink or hardlink."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for kind, name, content in entries:
            info = tarfile.TarInfo(name)
            if kind == "file":
                data = content.encode() if isinstance(content, str) else content
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
                continue
            if kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, str(content)
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, str(content)
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            archive.addfile(info)
    buffer.seek(0)
    return buffer


def test_extracts_files_dirs_and_inner_links(tmp_path: Path) -> None:
    target = tmp_path / "out"
    untar.extract_tgz(tgz(("dir", "proj", ""), ("file", "proj/Pulumi.yaml", "name: p\n"),
                          ("symlink", "proj/link.yaml", "Pulumi.yaml"), ("file", "top.txt", "x")), target)
    assert (target / "proj" / "Pulumi.yaml").read_text() == "name: p\n"
    assert (target / "proj" / "link.yaml").read_text() == "name: p\n"
    assert (target / "top.txt").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging directory left behind


@pytest.mark.parametrize("entries", [
    (("file", "../escape.txt", "x"),),
    (("file", "/abs.txt", "x"),),
    (("file", "ok.txt", "x"), ("file", "a/../../escape.txt", "x")),
    (("symlink", "abs-link", "/etc/passwd"),),
    (("symlink", "out-link", "../../outside"),),
    (("hardlink", "hard", "/etc/passwd"),),
    (("fifo", "pipe", ""),),
], ids=["dotdot", "absolute", "nested-dotdot", "absolute-symlink", "escaping-symlink", "absolute-hardlink", "fifo"])
def test_unsafe_archives_are_refused_and_leave_nothing(tmp_path: Path, entries: tuple[tuple[str, str, str], ...]
                                                        ) -> None:
    target = tmp_path / "out"
    with pytest.raises(untar.UnsafeArchiveError):
        untar.extract_tgz(tgz(*entries), target)
    assert list(target.iterdir()) == []
    assert not (tmp_path / "escape.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_size_cap(tmp_path: Path) -> None:
    archive = tgz(("file", "a", b"x" * 600), ("file", "b", b"y" * 600))
    with pytest.raises(untar.ArchiveTooLargeError, match="max archive size of 1000 bytes"):
        untar.extract_tgz(archive, tmp_path / "out", max_size=1000)
    archive.seek(0)
    untar.extract_tgz(archive, tmp_path / "ok", max_size=1200)
    archive.seek(0)
    untar.extract_tgz(archive, tmp_path / "unlimited", max_size=untar.UNLIMITED)


def test_not_a_tarball(tmp_path: Path) -> None:
    with pytest.raises(untar.UnsafeArchiveError):
        untar.extract_tgz(io.BytesIO(b"not gzip"), tmp_path / "out")


def test_replaces_existing_entries(tmp_path: Path) -> None:
    target = tmp_path / "out"
    (target / "proj").mkdir(parents=True)
    (target / "proj" / "stale.txt").write_text("old")
    untar.extract_tgz(tgz(("file", "proj/new.txt", "new")), target)
    assert sorted(p.name for p in (target / "proj").iterdir()) == ["new.txt"]
