"""What unpacking a workspace's ``node_modules`` costs on this machine (a script, not a test):
``python -m bench.unpackcost``.

Why: a new workspace of a Node.js program writes some 12,000 files, whether pko unpacks the dependency cache's
tree or npm installs it, and on some disks the kernel's file creation, not the unpacker, is most of the time
(docs/performance.md, "What limits the figures"). This builds the tree of each lockfile in the test bed's npm
mirror (`make tools` fills it; the largest lockfile a test resolved, or the Kubernetes TypeScript program's, resolved
here once) as the cache would, then unpacks it with pko's agent (:func:`nodemodules.extract`)
and with GNU tar, onto a folder of this machine's disk and onto tmpfs, a few rounds in turn, and prints each
unpack's wall time and CPU (user, system).

    python -m bench.unpackcost               # 3 rounds, the largest lockfile
    python -m bench.unpackcost --rounds 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pko.agent import nodemodules
from pko.depcache import npmtree, treebuild
from pko.testing import mirror as testmirror
from pko.testing import mirrorfill, programs

TMPFS = Path("/dev/shm")


def build_tree(mirror: Path, lockfile: Path, out: Path) -> int:
    """Write the tree of `lockfile` from the mirror's tarballs to `out`; the files it holds."""
    tree = npmtree.plan(lockfile.read_bytes())
    tarballs = {p.path: mirror / "tarballs" / p.name / p.tarball.rsplit("/", 1)[1] for p in tree.packages}
    with out.open("wb") as handle:
        return treebuild.write(tree, tarballs, handle).files


def _pko(tree: Path, into: Path) -> None:
    with tree.open("rb") as handle, tarfile.open(fileobj=handle, mode="r|gz") as archive:
        nodemodules.extract(archive, into / "unpacked")


def _tar(tree: Path, into: Path) -> None:
    subprocess.run(["tar", "xzf", str(tree), "-C", str(into)], check=True)


def timed(unpack: Callable[[Path, Path], None], tree: Path, base: Path) -> tuple[float, float, float]:
    """Wall, user and system seconds of one unpack of `tree` into a new folder under `base` (children included)."""
    into = Path(tempfile.mkdtemp(prefix="pko-unpack-", dir=base))
    try:
        before, start = os.times(), time.perf_counter()
        unpack(tree, into)
        wall, after = time.perf_counter() - start, os.times()
    finally:
        shutil.rmtree(into, ignore_errors=True)
    # to the millisecond: the clock's ticks are coarser, and a difference of sums of floats can come out at -1e-16
    user = round(after.user + after.children_user - before.user - before.children_user, 3)
    system = round(after.system + after.children_system - before.system - before.children_system, 3)
    return wall, user, system


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.unpackcost", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--disk", type=Path, default=Path(tempfile.gettempdir()), help="a folder on the disk")
    args = parser.parse_args(argv)
    mirror = mirrorfill.part_dir(mirrorfill.PART_NPM)
    if not (mirror / "tarballs").is_dir() or shutil.which("tar") is None:
        raise SystemExit(f"needs the test bed's npm mirror ({mirror}: run `make tools`) and GNU tar")
    lockfiles = sorted((mirror / "lockfiles").glob("*.json"), key=lambda p: p.stat().st_size)
    if not lockfiles:  # no test has resolved a program against this mirror yet: resolve the largest one
        print("resolving the Kubernetes TypeScript program's lockfile against the mirror (npm, once)", flush=True)
        with testmirror.running() as served:
            testmirror.npm_lockfile(served, programs.typescript_kubernetes())
        lockfiles = sorted((mirror / "lockfiles").glob("*.json"), key=lambda p: p.stat().st_size)
    places = [("disk", args.disk)] + ([("tmpfs", TMPFS)] if TMPFS.is_dir() else [])
    with tempfile.TemporaryDirectory(prefix="pko-unpackcost-") as tmp:
        tree = Path(tmp) / "tree.tgz"
        files = build_tree(mirror, lockfiles[-1], tree)
        print(f"node_modules of {lockfiles[-1].name}: {files} files, {tree.stat().st_size / 1e6:.1f} MB packed")
        print(f"  {'round':>5} {'onto':6} {'unpacker':9} {'wall s':>7} {'user s':>7} {'sys s':>7}")
        for round_ in range(1, args.rounds + 1):
            for place, base in places:
                for name, unpack in (("pko", _pko), ("GNU tar", _tar)):
                    wall, user, system = timed(unpack, tree, base)
                    print(f"  {round_:5d} {place:6} {name:9} {wall:7.2f} {user:7.2f} {system:7.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
