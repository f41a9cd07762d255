"""The npm tree a lockfile determines (pko.depcache.npmtree): what goes where, what is refused, what the key covers."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from pko.depcache import npmtree, treebuild


def _sri(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def _lock(packages: dict[str, Any], root: dict[str, Any] | None = None, version: int = 3) -> bytes:
    root = root or {"name": "app", "dependencies": {"a": "^1.0.0"}}
    return json.dumps({"name": "app", "lockfileVersion": version,
                       "packages": {"": root, **packages}}).encode()


A = {"version": "1.0.0", "integrity": _sri(b"a"), "resolved": "https://registry.npmjs.org/a/-/a-1.0.0.tgz"}


def test_a_lockfile_plans_each_package_where_npm_puts_it() -> None:
    tree = npmtree.plan(_lock({
        "node_modules/a": {**A, "bin": {"a-cli": "./bin/cli.js"}},
        "node_modules/@s/b": {"version": "2.0.0-rc.1", "integrity": _sri(b"b"), "hasInstallScript": True},
        "node_modules/a/node_modules/c": {"version": "3.0.0", "integrity": _sri(b"c") + " sha1-AAAA",
                                          "bin": {"@s/c": "c.js"}},
        "node_modules/alias": {"name": "real", "version": "1.0.0", "integrity": _sri(b"r")},
        "node_modules/a/node_modules/bundled": {"version": "1.0.0", "inBundle": True},
        "node_modules/fsevents": {"version": "2.3.3", "integrity": _sri(b"f"), "optional": True, "os": ["darwin"]},
    }))
    by_path = {p.path: p for p in tree.packages}
    assert sorted(by_path) == ["node_modules/@s/b", "node_modules/a", "node_modules/a/node_modules/c",
                               "node_modules/alias"]
    assert tree.skipped == ("node_modules/fsevents",)
    assert by_path["node_modules/@s/b"].tarball == "/@s/b/-/b-2.0.0-rc.1.tgz"
    assert by_path["node_modules/alias"].tarball == "/real/-/real-1.0.0.tgz"
    assert by_path["node_modules/a/node_modules/c"].integrity.algorithm == "sha512"
    assert [p.folder for p in tree.packages if p.install_script] == ["@s/b"]
    aliased = npmtree.plan(_lock({"node_modules/alias": {"name": "real", "version": "1.0.0",
                                                         "integrity": _sri(b"r"), "hasInstallScript": True}}))
    assert [p.folder for p in aliased.packages if p.install_script] == ["alias"]  # npm rebuild: the folder
    assert npmtree.bin_links(by_path["node_modules/a"]) == [
        ("node_modules/.bin/a-cli", "../a/bin/cli.js", "node_modules/a/bin/cli.js")]
    assert npmtree.bin_links(by_path["node_modules/a/node_modules/c"]) == [
        ("node_modules/a/node_modules/.bin/c", "../c/c.js", "node_modules/a/node_modules/c/c.js")]


def test_the_key_is_what_builds_the_tree_and_nothing_else() -> None:
    base = npmtree.plan(_lock({"node_modules/a": A}))
    renamed = npmtree.plan(_lock({"node_modules/a": A}, root={"name": "other", "dependencies": {"a": "^1.0.0"}}))
    assert base.key == renamed.key  # projects that differ only in their own name share a tree
    assert base.key == npmtree.plan(_lock({"node_modules/a": A}, version=2)).key
    moved = npmtree.plan(_lock({"node_modules/x/node_modules/a": A, "node_modules/x": {**A, "version": "1.0.1"}}))
    other_bytes = npmtree.plan(_lock({"node_modules/a": {**A, "integrity": _sri(b"planted")}}))
    with_bin = npmtree.plan(_lock({"node_modules/a": {**A, "bin": {"a": "a.js"}}}))
    assert len({base.key, moved.key, other_bytes.key, with_bin.key}) == 4
    # a weaker extra hash beside the checked one selects the same tree: no new key for nothing
    padded = npmtree.plan(_lock({"node_modules/a": {**A, "integrity": A["integrity"] + " sha1-AAAA"}}))
    assert padded.key == base.key


@pytest.mark.parametrize(("packages", "reason"), [
    ({"node_modules/a": {**A, "link": True}}, "is a link"),
    ({"node_modules/a": {**A, "resolved": "git+ssh://git@github.com/x/a.git#abc"}}, "is not a registry tarball"),
    ({"node_modules/a": {**A, "resolved": "file:../a"}}, "is not a registry tarball"),
    ({"node_modules/a": {"version": "1.0.0"}}, "has no integrity hash"),
    ({"node_modules/a": {**A, "integrity": "md5-AAAA"}}, "no usable integrity hash"),
    ({"node_modules/../../etc": A}, "is not a node_modules path"),
    ({"node_modules/a/../../x": A}, "is not a node_modules path"),
    ({"packages/local": A}, "outside node_modules"),
    ({"node_modules/a": {**A, "version": "github:x/a"}}, "is not a registry version"),
    ({"node_modules/a": {**A, "bin": {"a": "../../../../usr/bin/sh"}}}, "leaves its package"),
    ({"node_modules/a": {**A, "bin": {"..": "a.js"}}}, "leaves its package"),
    ({"node_modules/a": {**A, "os": ["win32"]}}, "for another platform"),
    ({"node_modules/a": {**A, "cpu": ["!x64"]}}, "for another platform"),
    ({"node_modules/a": {**A, "libc": ["musl"]}}, "for another platform"),
    ({"node_modules/a": A, "node_modules/a/node_modules/b": {"version": "1.0.0", "inBundle": True,
                                                               "bin": {"b": "b.js"}}}, "is bundled in its parent"),
    ({}, "installs no package"),
])
def test_lockfiles_it_does_not_build_are_refused_with_the_reason(packages: dict[str, Any], reason: str) -> None:
    with pytest.raises(npmtree.Refused, match=reason.replace(".", r"\.")):
        npmtree.plan(_lock(packages))


def test_only_npm_7_lockfiles_are_read() -> None:
    with pytest.raises(npmtree.Refused, match="lockfileVersion 2 and 3"):
        npmtree.plan(_lock({"node_modules/a": A}, version=1))
    with pytest.raises(npmtree.Refused, match="not JSON"):
        npmtree.plan(b"{")
    with pytest.raises(npmtree.Refused, match="over"):
        npmtree.plan(b" " * (npmtree.MAX_LOCKFILE_BYTES + 1))


def test_tarball_members_land_inside_their_package_only() -> None:
    package = npmtree.plan(_lock({"node_modules/@s/b": {**A, "version": "1.0.0"}})).packages[0]
    assert npmtree.member_path(package, "package/lib/index.js") == "node_modules/@s/b/lib/index.js"
    assert npmtree.member_path(package, "other-top/./x.js") == "node_modules/@s/b/x.js"  # any top folder
    assert npmtree.member_path(package, "package/../../../etc/passwd") is None
    assert npmtree.member_path(package, "/abs/x") is None
    assert npmtree.member_path(package, "package/") is None


def test_a_lockfile_is_current_when_its_root_asks_for_what_package_json_asks_for() -> None:
    root = {"name": "app", "dependencies": {"a": "^1.0.0"}, "devDependencies": {"t": "5.9.3"}}
    assert npmtree.root_matches(root, {"name": "x", "main": "i.ts", "dependencies": {"a": "^1.0.0"},
                                       "devDependencies": {"t": "5.9.3"}})
    assert not npmtree.root_matches(root, {"dependencies": {"a": "^2.0.0"}, "devDependencies": {"t": "5.9.3"}})
    assert not npmtree.root_matches(root, {"dependencies": {"a": "^1.0.0"}})


def test_a_tarball_s_members_are_repacked_under_the_package_the_last_copy_winning(tmp_path: Path) -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as archive:
        for name, data, mode in (("package/index.js", b"first", 0o644), ("package/bin/cli.js", b"#!", 0o644),
                                 ("package/index.js", b"second", 0o644), ("package/../../escape", b"x", 0o644)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            archive.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("package/link")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
    tarball = tmp_path / "a.tgz"
    tarball.write_bytes(raw.getvalue())
    entry = {"version": "1.0.0", "integrity": _sri(raw.getvalue()), "bin": {"a": "bin/cli.js"}}
    tree = npmtree.plan(_lock({"node_modules/a": entry}))
    out = io.BytesIO()
    written = treebuild.write(tree, {"node_modules/a": tarball}, out)
    assert (written.packages, written.files, written.links) == (1, 2, 1)
    out.seek(0)
    with tarfile.open(fileobj=out, mode="r:gz") as built:
        members = {m.name: m for m in built.getmembers()}
        assert sorted(members) == ["node_modules/.bin/a", "node_modules/a/bin/cli.js", "node_modules/a/index.js"]
        handle = built.extractfile(members["node_modules/a/index.js"])
        assert handle is not None
        assert handle.read() == b"second"
        assert members["node_modules/a/bin/cli.js"].mode == 0o755  # a bin target is executable
        assert members["node_modules/.bin/a"].linkname == "../a/bin/cli.js"
    with pytest.raises(npmtree.Refused, match="does not match the lockfile"):
        treebuild.write(npmtree.plan(_lock({"node_modules/a": {**entry, "integrity": _sri(b"other")}})),
                        {"node_modules/a": tarball}, io.BytesIO())
