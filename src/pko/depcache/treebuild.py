"""Write the ``node_modules`` tree of an :class:`~pko.depcache.npmtree.Tree` as one gzipped tar, from the package
tarballs the cache holds.

Why repack instead of unpacking: the operator never writes a package's files to its own disk; it streams each
tarball's members into the tree archive under the package's path, which a workspace then unpacks in one pass.
It does what ``npm ci --ignore-scripts`` does to the files: the tarball's top folder replaced by the package's
path, regular files and folders only (npm drops the links a tarball carries), modes normalized (0644, 0755 for
what was executable and for every bin target), and a relative symlink per bin in the ``.bin`` folder beside it.

Each tarball is checked against the lockfile's integrity hash before a byte of it is used. Runs in a worker
thread (blocking file I/O and gzip); must never follow a member outside its package.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pko.depcache.npmtree import Package, Refused, Tree, bin_links, member_path

#: gzip level of the tree: level 1 is most of the size gain at a fraction of the CPU (pods unpack on the node).
COMPRESSLEVEL = 1


@dataclass
class Written:
    packages: int = 0
    files: int = 0
    links: int = 0


def verify(package: Package, tarball: Path) -> None:
    """Refuse a tarball whose bytes are not the ones the lockfile's integrity names."""
    digest = hashlib.new(package.integrity.algorithm)
    with tarball.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    if not package.integrity.matches(digest.digest()):
        raise Refused(f"{package.name}@{package.version}: the registry's tarball does not match the lockfile's "
                      f"{package.integrity.algorithm} integrity")


def verify_all(tree: Tree, tarballs: Mapping[str, Path]) -> None:
    """:func:`verify` every package of `tree`: a tree answered while it is written must be refused before its
    first byte, not cut off at the package that does not match. (:func:`write` checks each again as it goes: a
    few tens of milliseconds once per lockfile, for a writer that trusts no caller.)"""
    for package in tree.packages:
        verify(package, tarballs[package.path])


def write(tree: Tree, tarballs: Mapping[str, Path], out: io.BufferedIOBase) -> Written:
    """Write `tree` to `out` (a gzipped tar); `tarballs` maps each package's path to its tarball file."""
    written = Written()
    with tarfile.open(fileobj=out, mode="w:gz", compresslevel=COMPRESSLEVEL, format=tarfile.PAX_FORMAT) as archive:
        for package in tree.packages:
            tarball = tarballs[package.path]
            verify(package, tarball)
            links = bin_links(package)
            executables = {executable for _, _, executable in links}
            written.files += _repack(package, tarball, executables, archive)
            written.packages += 1
            for link, target, _ in links:
                info = tarfile.TarInfo(link)
                info.type = tarfile.SYMTYPE
                info.linkname = target
                info.mode = 0o777
                archive.addfile(info)
                written.links += 1
    return written


def _repack(package: Package, tarball: Path, executables: set[str], archive: tarfile.TarFile) -> int:
    files = 0
    try:
        with tarfile.open(tarball, mode="r:*") as source:
            last: dict[str, tarfile.TarInfo] = {}  # a name given twice: the later one, as unpacking overwrites
            for member in source.getmembers():
                target = member_path(package, member.name)
                if member.isfile() and target is not None:  # folders come with their files; links and devices
                    last[target] = member                   # are dropped, as npm does
            for target, member in last.items():
                handle = source.extractfile(member)
                if handle is None:
                    continue
                info = tarfile.TarInfo(target)
                info.size = member.size
                info.mtime = member.mtime
                info.mode = 0o755 if (member.mode & 0o111 or target in executables) else 0o644
                archive.addfile(info, handle)
                files += 1
    except (tarfile.TarError, EOFError, OSError) as err:
        raise Refused(f"{package.name}@{package.version}: unreadable tarball: {err}") from None
    return files
