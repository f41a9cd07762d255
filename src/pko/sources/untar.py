"""Extracting a gzipped tarball from an untrusted source without letting it write outside the target.

Flux artifacts and Program archives come over the network, so an archive is refused when any entry has an
absolute path or climbs out with ``..``, when a symbolic or hard link is absolute or points outside the target,
when an entry is a device or FIFO, or when its files add up to more than the size cap. Extraction happens in a
staging directory beside the target and is moved into place only when the whole archive passed, so a refused
archive leaves nothing behind.

It must never follow a link that the archive itself created while writing, and never extract partially.

The checks are ``tarfile``'s ``data`` extraction filter where Python has it (3.11.4 and later), and the same rules
written out here where it does not: the agent executable bundles whatever Python its image has, and Debian
bookworm's is 3.11.2.
"""

from __future__ import annotations

import copy
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import IO

UNLIMITED = -1


class UnsafeArchiveError(Exception):
    """The archive would write outside the target, or holds a kind of entry we refuse."""


class ArchiveTooLargeError(UnsafeArchiveError):
    """The archive's files add up to more than the cap."""


def _check(member: tarfile.TarInfo, staging: str, max_size: int, total: int) -> tuple[tarfile.TarInfo, int]:
    if member.isfile():
        total += member.size
        if max_size != UNLIMITED and total > max_size:
            raise ArchiveTooLargeError(f"tar is bigger than max archive size of {max_size} bytes")
    if member.name.startswith("/") or os.path.isabs(member.name):
        raise UnsafeArchiveError(f"refusing archive entry {member.name!r}: absolute path")
    if not HAS_DATA_FILTER:
        return legacy_data_filter(member, staging), total
    try:
        filtered = tarfile.data_filter(member, staging)
    except tarfile.FilterError as err:
        raise UnsafeArchiveError(f"refusing archive entry {member.name!r}: {err}") from None
    if filtered is None:
        raise UnsafeArchiveError(f"refusing archive entry {member.name!r}")
    return filtered, total


HAS_DATA_FILTER = hasattr(tarfile, "data_filter")


def _inside(root: str, path: str) -> bool:
    return os.path.commonpath([root, path]) == root


def legacy_data_filter(member: tarfile.TarInfo, staging: str) -> tarfile.TarInfo:
    """The ``data`` filter's rules for a Python without it: nothing outside `staging`, no absolute or escaping
    link, no device or FIFO, and no set-uid/set-gid/sticky or group/other write bits. Returns a sanitised copy."""
    root = os.path.realpath(staging)
    where = os.path.realpath(os.path.join(root, member.name))
    if not _inside(root, where):
        raise UnsafeArchiveError(f"refusing archive entry {member.name!r}: it would be outside the destination")
    if member.ischr() or member.isblk() or member.isfifo():
        raise UnsafeArchiveError(f"refusing archive entry {member.name!r}: a device or FIFO")
    if member.issym() or member.islnk():
        if os.path.isabs(member.linkname):
            raise UnsafeArchiveError(f"refusing archive entry {member.name!r}: an absolute link")
        base = os.path.dirname(where) if member.issym() else root
        if not _inside(root, os.path.realpath(os.path.join(base, member.linkname))):
            raise UnsafeArchiveError(f"refusing archive entry {member.name!r}: a link outside the destination")
    sanitised = copy.copy(member)
    if member.isfile() or member.isdir():
        mode = member.mode & 0o755
        sanitised.mode = mode | (0o600 if member.isfile() else 0o700)  # the owner can always read and write
    return sanitised


def extract_tgz(stream: IO[bytes], target: Path, max_size: int = UNLIMITED) -> None:
    """Extract a ``.tar.gz`` stream into `target` (created if needed), all or nothing."""
    target.mkdir(parents=True, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".untar-", dir=target.parent)
    try:
        total = 0
        try:
            with tarfile.open(fileobj=stream, mode="r|gz") as archive:
                for member in archive:
                    checked, total = _check(member, staging, max_size, total)
                    if HAS_DATA_FILTER:
                        archive.extract(checked, staging, filter="fully_trusted", set_attrs=True)
                    else:  # checked above; this Python has no `filter` argument
                        archive.extract(checked, staging, set_attrs=True)
        except (tarfile.ReadError, EOFError, OSError) as err:
            if isinstance(err, UnsafeArchiveError):
                raise
            raise UnsafeArchiveError(f"unable to read the archive: {err}") from err
        for entry in os.listdir(staging):
            destination = target / entry
            if destination.is_dir() and not destination.is_symlink():
                shutil.rmtree(destination)
            elif destination.exists() or destination.is_symlink():
                destination.unlink()
            os.rename(os.path.join(staging, entry), destination)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
