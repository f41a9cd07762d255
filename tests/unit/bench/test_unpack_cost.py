"""bench.unpackcost times both unpackers on the same tree and leaves nothing behind."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from bench import unpackcost


def _tree(path: Path) -> None:
    with tarfile.open(path, "w:gz") as archive:
        for name in ("node_modules/a/package.json", "node_modules/a/index.js"):
            info = tarfile.TarInfo(name)
            info.size = 2
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(b"{}"))


def test_each_unpacker_is_timed_and_its_folder_removed(tmp_path: Path) -> None:
    tree = tmp_path / "tree.tgz"
    _tree(tree)
    base = tmp_path / "base"
    base.mkdir()
    for unpack in (unpackcost._pko, unpackcost._tar):
        wall, user, system = unpackcost.timed(unpack, tree, base)
        assert wall > 0
        assert user >= 0
        assert system >= 0
        assert list(base.iterdir()) == []
