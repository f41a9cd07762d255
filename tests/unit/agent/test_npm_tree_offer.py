"""When the agent takes the dependency cache's npm tree instead of `npm install` (pko.agent.nodemodules.offer):
only when it gives what npm would, and otherwise with the reason it logs before installing as before."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from pko.agent import nodemodules

ENV = {"PKO_NPM_TREE_URL": "http://pko.ns:80/cache/npm-tree", "NPM_CONFIG_REGISTRY": "http://pko.ns:80/cache/npm/"}
PROJECT = {"name": "app", "runtime": {"name": "nodejs", "options": {"packagemanager": "npm"}}}
DEPS = {"dependencies": {"a": "1.0.0"}}


def _project(path: Path, deps: dict[str, dict[str, str]] = DEPS) -> Path:
    (path / "package.json").write_text(json.dumps({"name": "app", **DEPS}))
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(b"a").digest()).decode()
    (path / "package-lock.json").write_text(json.dumps({"lockfileVersion": 3, "packages": {
        "": {"name": "app", **deps}, "node_modules/a": {"version": "1.0.0", "integrity": integrity}}}))
    return path


def test_a_current_npm_lockfile_under_the_cache_s_registry_is_offered(tmp_path: Path) -> None:
    found = nodemodules.offer(_project(tmp_path), PROJECT, ENV)
    assert isinstance(found, nodemodules.Offer)
    assert found.url == ENV["PKO_NPM_TREE_URL"]
    assert [p.path for p in found.tree.packages] == ["node_modules/a"]
    assert isinstance(nodemodules.offer(tmp_path, {"runtime": "nodejs"}, ENV), nodemodules.Offer)


@pytest.mark.parametrize(("change", "reason"), [
    ("no-offer", "the operator offers no npm trees"),
    ("python", "runtime is python"),
    ("yarn", "the project uses yarn"),
    ("own-registry", "registry is not the dependency cache's"),
    ("node_modules", "node_modules is already there"),
    ("no-lockfile", "has no package-lock.json"),
    ("yarn-lock", "another package manager's lockfile"),
    ("stale", "not current with package.json"),
    ("broken", "cannot be used as it is"),
    ("postinstall", "package.json has its own install scripts (postinstall)"),
])
def test_otherwise_the_reason_is_given(tmp_path: Path, change: str, reason: str) -> None:
    workdir = _project(tmp_path, {"dependencies": {"a": "0.9.0"}} if change == "stale" else DEPS)
    project = {**PROJECT}
    env = dict(ENV)
    if change == "no-offer":
        del env["PKO_NPM_TREE_URL"]
    elif change == "python":
        project["runtime"] = "python"
    elif change == "yarn":
        project["runtime"] = {"name": "nodejs", "options": {"packagemanager": "yarn"}}
    elif change == "own-registry":
        env["NPM_CONFIG_REGISTRY"] = "https://npm.tenant.example/"
    elif change == "node_modules":
        (workdir / "node_modules").mkdir()
    elif change == "no-lockfile":
        (workdir / "package-lock.json").unlink()
    elif change == "yarn-lock":
        project["runtime"] = "nodejs"
        (workdir / "yarn.lock").write_text("")
    elif change == "broken":
        (workdir / "package-lock.json").write_text('{"lockfileVersion": 1}')
    elif change == "postinstall":
        (workdir / "package.json").write_text(json.dumps({"name": "app", **DEPS, "scripts": {"postinstall": "tsc"}}))
    found = nodemodules.offer(workdir, project, env)
    assert isinstance(found, str)
    assert reason in found


def _tar(members: list[tuple[str, bytes | str | None, int]]) -> io.BytesIO:
    """A gzipped tar of (name, file bytes | link target | None for a folder, tar type)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as archive:
        for name, content, kind in members:
            info = tarfile.TarInfo(name)
            info.type = bytes([kind]) if isinstance(kind, int) else kind
            if isinstance(content, bytes):
                info.size, info.mode = len(content), 0o755 if name.endswith(".sh") else 0o600
                archive.addfile(info, io.BytesIO(content))
            else:
                if isinstance(content, str):
                    info.linkname = content
                archive.addfile(info)
    raw.seek(0)
    return raw


FILE, LINK, HARD, DIR, FIFO = tarfile.REGTYPE[0], tarfile.SYMTYPE[0], tarfile.LNKTYPE[0], tarfile.DIRTYPE[0], \
    tarfile.FIFOTYPE[0]


def test_a_tree_unpacks_files_folders_and_links_inside_node_modules(tmp_path: Path) -> None:
    tree = _tar([("node_modules/a/index.js", b"module.exports = 1", FILE), ("node_modules/a/run.sh", b"#!", FILE),
                 ("node_modules/empty", None, DIR), ("node_modules/.bin/run", "../a/run.sh", LINK)])
    with tarfile.open(fileobj=tree, mode="r|gz") as archive:
        nodemodules.extract(archive, tmp_path)
    assert (tmp_path / "node_modules/a/index.js").read_bytes() == b"module.exports = 1"
    assert (tmp_path / "node_modules/a/index.js").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "node_modules/a/run.sh").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "node_modules/.bin/run").resolve() == (tmp_path / "node_modules/a/run.sh").resolve()
    assert (tmp_path / "node_modules/empty").is_dir()


@pytest.mark.parametrize(("members", "reason"), [
    ([("../etc/passwd", b"x", FILE)], "outside node_modules"),
    ([("/node_modules/a", b"x", FILE)], "outside node_modules"),
    ([("node_modules/../../x", b"x", FILE)], "outside node_modules"),
    ([("src/index.js", b"x", FILE)], "outside node_modules"),
    ([("node_modules/.bin/sh", "/bin/sh", LINK)], "links outside node_modules"),
    ([("node_modules/.bin/up", "../../../home", LINK)], "links outside node_modules"),
    ([("node_modules/a", "node_modules/b", HARD)], "not a file, a folder or a link"),
    ([("node_modules/fifo", None, FIFO)], "not a file, a folder or a link"),
    ([("node_modules/up", "..", LINK)], "links outside node_modules"),
    ([("node_modules/x/a", "..", LINK), ("node_modules/l", "x/a/../..", LINK)], "links outside node_modules"),
])
def test_a_tree_member_outside_node_modules_stops_the_unpack(
        tmp_path: Path, members: list[tuple[str, bytes | str | None, int]], reason: str) -> None:
    with tarfile.open(fileobj=_tar(members), mode="r|gz") as archive, \
            pytest.raises(nodemodules.UnsafeMember, match=reason):
        nodemodules.extract(archive, tmp_path / "staging")
    assert not (tmp_path / "etc").exists()


def test_nothing_is_written_through_a_link_of_the_tree_even_one_that_stays_inside(tmp_path: Path) -> None:
    for members in ([("node_modules/l", "a", LINK), ("node_modules/l/index.js", b"x", FILE)],
                    [("node_modules/l", "a", LINK), ("node_modules/l/deep/index.js", b"x", FILE)],
                    [("node_modules/l", "a", LINK), ("node_modules/l", None, DIR)],
                    # a link inside a folder the unpack already made, then a member below the link
                    [("node_modules/d/x.js", b"x", FILE), ("node_modules/d/l", "../a", LINK),
                     ("node_modules/d/l/index.js", b"x", FILE)]):
        staging = tmp_path / str(len(list(tmp_path.iterdir())))
        with tarfile.open(fileobj=_tar(members), mode="r|gz") as archive, \
                pytest.raises(nodemodules.UnsafeMember, match="would be written through a link"):
            nodemodules.extract(archive, staging)
        assert not (staging / "node_modules/a").exists()


def test_a_folder_is_never_replaced_by_a_link_nor_a_file_by_a_folder(tmp_path: Path) -> None:
    for members, reason in (
            ([("node_modules/d/x.js", b"x", FILE), ("node_modules/d", "a", LINK)], "would replace a folder"),
            ([("node_modules/d/x.js", b"x", FILE), ("node_modules/d", b"x", FILE)], "would replace a folder"),
            ([("node_modules/f", b"x", FILE), ("node_modules/f/g.js", b"y", FILE)], "is a file of the tree")):
        staging = tmp_path / str(len(list(tmp_path.iterdir())))
        with tarfile.open(fileobj=_tar(members), mode="r|gz") as archive, \
                pytest.raises(nodemodules.UnsafeMember, match=reason):
            nodemodules.extract(archive, staging)
        assert not (staging / "node_modules/a").exists()


def test_a_later_member_of_the_same_name_wins_and_modes_ignore_the_umask(tmp_path: Path) -> None:
    tree = _tar([("node_modules/a/x.js", b"first", FILE), ("node_modules/a/x.js", b"second", FILE),
                 ("node_modules/.bin/x", "../a/x.js", LINK), ("node_modules/.bin/x", b"file now", FILE),
                 ("node_modules/a/run.sh", b"#!", FILE)])
    old = os.umask(0o077)
    try:
        with tarfile.open(fileobj=tree, mode="r|gz") as archive:
            nodemodules.extract(archive, tmp_path)
    finally:
        os.umask(old)
    assert (tmp_path / "node_modules/a/x.js").read_bytes() == b"second"
    assert not (tmp_path / "node_modules/.bin/x").is_symlink()
    assert (tmp_path / "node_modules/.bin/x").read_bytes() == b"file now"
    assert (tmp_path / "node_modules/a/x.js").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "node_modules/a/run.sh").stat().st_mode & 0o777 == 0o755


def test_a_tree_is_only_unpacked_into_an_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules/planted").symlink_to("/etc")
    with tarfile.open(fileobj=_tar([("node_modules/planted/passwd", b"x", FILE)]), mode="r|gz") as archive, \
            pytest.raises(nodemodules.UnsafeMember, match="not empty"):
        nodemodules.extract(archive, tmp_path)


def test_trees_are_only_taken_on_the_platform_they_are_built_for() -> None:
    assert nodemodules.platform_reason("x86_64", musl=False) is None
    assert nodemodules.platform_reason("aarch64", musl=False) == (
        "trees are built for linux/x64, this workspace is aarch64")
    assert "musl" in (nodemodules.platform_reason("x86_64", musl=True) or "")
