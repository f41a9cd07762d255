"""Pack PyInstaller's onedir tree behind the launcher into the one agent executable (see launcher.c for why).

    python pack.py LAUNCHER ONEDIR OUTPUT

OUTPUT = LAUNCHER + an uncompressed ustar archive of ONEDIR's contents + a 64-byte trailer (magic, archive offset,
archive size, archive id). The archive is deterministic (sorted, zero times and owners), so the id — the first 40 hex
digits of its SHA-256 — names the tree: the launcher unpacks a given id once and reuses it. Only directories and
regular files go in (what the launcher knows how to unpack); anything else fails the build.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import struct
import sys
import tarfile
from pathlib import Path

MAGIC = b"PKOAGNT1"
ID_LENGTH = 40


def archive(tree: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for root, dirs, files in os.walk(tree):
            dirs.sort()
            for name in sorted(dirs) + sorted(files):
                path = Path(root, name)
                mode = path.lstat().st_mode
                if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                    raise SystemExit(f"pack.py: {path} is neither a directory nor a regular file")
                info = tar.gettarinfo(str(path), arcname=str(path.relative_to(tree)))
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                info.mode = 0o755 if stat.S_ISDIR(mode) or mode & 0o111 else 0o644
                if info.isdir():
                    tar.addfile(info)
                else:
                    with path.open("rb") as content:
                        tar.addfile(info, content)
    return buffer.getvalue()


def main(launcher: str, tree: str, output: str) -> None:
    front = Path(launcher).read_bytes()
    payload = archive(Path(tree))
    ident = hashlib.sha256(payload).hexdigest()[:ID_LENGTH].encode()
    trailer = MAGIC + struct.pack("<QQ", len(front), len(payload)) + ident
    assert len(trailer) == 64
    with open(output, "wb") as out:
        out.write(front)
        out.write(payload)
        out.write(trailer)
    os.chmod(output, 0o755)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
