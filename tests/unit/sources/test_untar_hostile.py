"""More hostile archives: escaping hard links, devices, writes through a link, a decompression bomb, truncation.

Complements test_untar_safety.py (which covers `..`, absolute names, absolute/escaping symlinks, absolute hard
links and FIFOs); each case here must be refused with a message naming the problem and leave nothing behind.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest

from pko.sources import untar


@pytest.fixture(autouse=True, params=["data-filter", "legacy"])
def python_filters(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.param == "legacy":
        monkeypatch.setattr(untar, "HAS_DATA_FILTER", False)


def _archive(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def _info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


def _refused(tmp_path: Path, data: bytes, why: str, **kwargs: int) -> None:
    target = tmp_path / "out"
    with pytest.raises(untar.UnsafeArchiveError, match=why):
        untar.extract_tgz(io.BytesIO(data), target, **kwargs)
    assert list(target.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging directory, nothing beside it


def test_relative_hardlink_out_of_the_tree(tmp_path: Path) -> None:
    _refused(tmp_path, _archive((_info("hard", tarfile.LNKTYPE, "../../etc/passwd"), None)),
             "refusing archive entry 'hard'")


@pytest.mark.parametrize("kind", [tarfile.CHRTYPE, tarfile.BLKTYPE], ids=["char-device", "block-device"])
def test_device_files(tmp_path: Path, kind: bytes) -> None:
    device = _info("dev-null", kind)
    device.devmajor, device.devminor = 1, 3
    _refused(tmp_path, _archive((device, None)), "refusing archive entry 'dev-null'")


def test_write_through_a_symlink_to_a_directory_outside(tmp_path: Path) -> None:
    """The classic two-step: a link to `..`, then a file "inside" the link."""
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    _refused(tmp_path, _archive((_info("up", tarfile.SYMTYPE, ".."), None), (_info("up/escape.txt"), b"x")),
             "refusing archive entry 'up'")
    assert not outside.exists()
    assert not (tmp_path / "escape.txt").exists()


def test_write_through_an_inner_symlink_chain(tmp_path: Path) -> None:
    """Each link stays inside on its own; together they climb out (a → b/.., b → .)."""
    data = _archive((_info("b", tarfile.SYMTYPE, "."), None), (_info("a", tarfile.SYMTYPE, "b/../.."), None),
                    (_info("a/escape.txt"), b"x"))
    _refused(tmp_path, data, "refusing archive entry")
    assert not (tmp_path / "escape.txt").exists()


def test_decompression_bomb_is_refused_before_it_is_written(tmp_path: Path) -> None:
    """64 MiB of zeros compress to ~64 KiB; the cap (1 MiB) refuses the entry from its header, before writing."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = _info("bomb.bin")
        info.size = 64 * 1024 * 1024
        archive.addfile(info, io.BytesIO(bytes(info.size)))
    assert len(buffer.getvalue()) < 1024 * 1024
    _refused(tmp_path, buffer.getvalue(), "bigger than max archive size of 1048576 bytes", max_size=1024 * 1024)


def test_truncated_tarball(tmp_path: Path) -> None:
    whole = _archive((_info("Pulumi.yaml"), b"name: p\nruntime: yaml\n" * 200), (_info("b.txt"), b"y" * 5000))
    _refused(tmp_path, whole[: len(whole) // 2], "unable to read the archive")


def test_truncated_tar_inside_a_complete_gzip(tmp_path: Path) -> None:
    """The gzip stream is whole, the tar in it stops mid-entry: still refused, not half extracted."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as archive:
        info = _info("big.txt")
        data = b"z" * 10000
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    _refused(tmp_path, gzip.compress(raw.getvalue()[:3000]), "unable to read the archive")
