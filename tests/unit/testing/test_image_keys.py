"""Image cache keys and the cache protocol: a key changes exactly when an input does, and only a finished build
(renamed into place with its metadata) counts as built."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from pko.testing import images, oci


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    monkeypatch.setenv("PKO_BIN_DIR", str(path))
    monkeypatch.setenv("PKO_IMAGE_DIR", str(tmp_path / "images"))
    return path


def _executable(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    path.chmod(0o755)
    return path


def _base(digest: str = "sha256:" + "1" * 64) -> images.BuiltImage:
    return images.BuiltImage("python-base", (images.PYTHON_BASE_REF,), Path("/nonexistent"), "k" * 64, digest)


def test_cache_key_depends_on_every_input_but_not_on_order() -> None:
    inputs = {"a": "1", "b": "2"}
    key = images.cache_key("x", ("r:1",), inputs)
    assert key == images.cache_key("x", ("r:1",), {"b": "2", "a": "1"})
    assert key != images.cache_key("x", ("r:1",), {"a": "1", "b": "3"})
    assert key != images.cache_key("x", ("r:2",), inputs)
    assert key != images.cache_key("y", ("r:1",), inputs)
    assert key != images.cache_key("x", ("r:1",), {"a": "1"})


def test_coredns_key_follows_the_binary(bin_dir: Path) -> None:
    _executable(bin_dir / "coredns", b"one")
    first = images.current_key("coredns")
    assert images.current_key("coredns") == first
    _executable(bin_dir / "coredns", b"two")
    assert images.current_key("coredns") != first


def test_workspace_key_follows_binaries_and_base_digest(bin_dir: Path) -> None:
    for name in images._WORKSPACE_BINARIES:
        _executable(bin_dir / name, name.encode())
    recipe = images.RECIPES["workspace"]

    def key(base: images.BuiltImage) -> str:
        return images.cache_key("workspace", recipe.refs, recipe.inputs(base))

    first = key(_base())
    assert key(_base()) == first
    assert key(_base("sha256:" + "2" * 64)) != first
    _executable(bin_dir / "pulumi-language-python", b"the official host")
    second = key(_base())
    assert second != first
    _executable(bin_dir / "pulumi-language-nodejs", b"a newer Node.js host")
    assert key(_base()) != second


def test_missing_binary_is_named(bin_dir: Path) -> None:
    with pytest.raises(images.MissingInputError, match=r"pko-go-manager not found .*make tools"):
        images.RECIPES["pko-go"].inputs(_base())


def test_pko_key_needs_the_base_image(bin_dir: Path) -> None:
    with pytest.raises(images.ImageError, match=r"python-base .* run `make images`"):
        images.built("pko")


def test_pko_key_follows_the_base_digest() -> None:
    recipe = images.RECIPES["pko"]
    assert recipe.inputs(_base()) == recipe.inputs(_base())
    assert recipe.inputs(_base()) != recipe.inputs(_base("sha256:" + "3" * 64))


def test_pko_gets_a_content_tag() -> None:
    refs = images.RECIPES["pko"].all_refs("abcdef0123456789" * 4)
    assert refs == ("docker.io/pko/pko:dev", "docker.io/pko/pko:abcdef012345")


def test_only_a_finished_build_counts(bin_dir: Path) -> None:
    _executable(bin_dir / "coredns", b"dns")
    key = images.current_key("coredns")
    parent = images.image_dir() / "coredns"
    # What a killed build leaves behind: a partial directory, or an entry without its metadata.
    partial = parent / f".{key[:16]}.partial-123"
    partial.mkdir(parents=True)
    (partial / "image.tar").write_bytes(b"")
    (partial / "image.json").write_text(json.dumps({"key": key, "refs": ["r"], "digest": "d"}))
    with pytest.raises(images.ImageError, match="run `make images`"):
        images.built("coredns")
    entry = parent / key[:16]
    entry.mkdir()
    (entry / "image.tar").write_bytes(b"")
    with pytest.raises(images.ImageError, match="run `make images`"):
        images.built("coredns")

    (entry / "image.json").write_text(json.dumps({"key": key, "refs": ["docker.io/pko-test/coredns:1.13.1"],
                                                  "digest": "sha256:" + "4" * 64}))
    image = images.built("coredns")
    assert image.archive == entry / "image.tar"
    assert image.refs == ("docker.io/pko-test/coredns:1.13.1",)
    assert image.key == key

    # A changed binary makes the cached image stale.
    _executable(bin_dir / "coredns", b"dns, rebuilt")
    with pytest.raises(images.ImageError, match="not built for the current"):
        images.built("coredns")


def test_unknown_image_is_refused() -> None:
    with pytest.raises(images.ImageError, match="unknown image 'nope'"):
        images.built("nope")


def _elf(interp: bool) -> bytes:
    phoff, phentsize = 64, 56
    types = [6, 3, 1] if interp else [6, 1]
    header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header += struct.pack("<HHIQQQIHHHHHH", 2, 62, 1, 0x401000, phoff, 0, 0, 64, phentsize, len(types), 64, 0, 0)
    table = b"".join(struct.pack("<II", t, 5) + bytes(phentsize - 8) for t in types)
    return header + table


def test_static_elf_detection(tmp_path: Path) -> None:
    static = _executable(tmp_path / "static", _elf(interp=False))
    dynamic = _executable(tmp_path / "dynamic", _elf(interp=True))
    script = _executable(tmp_path / "script", b"#!/bin/sh\n")
    assert images.is_static_elf(static)
    assert not images.is_static_elf(dynamic)
    assert not images.is_static_elf(script)


def test_debian_sources_keep_only_debian_stanzas(tmp_path: Path) -> None:
    (tmp_path / "debian.sources").write_text(
        "Types: deb\n# a snapshot comment\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n"
    )
    (tmp_path / "nodesource.sources").write_text(
        "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\nComponents: main\n"
    )
    (tmp_path / "trixie.sources").write_text("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\n")
    sources = images.debian_sources(tmp_path)
    assert "deb.debian.org/debian\n" in sources
    assert "bookworm-security" in sources
    assert "nodesource" not in sources
    assert "trixie" not in sources
    assert "#" not in sources


def test_debian_sources_default_to_the_stock_mirror(tmp_path: Path) -> None:
    sources = images.debian_sources(tmp_path / "absent")
    assert "URIs: http://deb.debian.org/debian\n" in sources
    assert "Suites: bookworm-security" in sources


def test_image_dir_honours_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PKO_IMAGE_DIR", str(tmp_path))
    assert images.image_dir() == tmp_path
    monkeypatch.delenv("PKO_IMAGE_DIR")
    assert images.image_dir() == Path(os.path.expanduser("~")) / ".cache" / "pko" / "images"


def test_every_recipe_has_refs_and_known_base() -> None:
    for name, recipe in images.RECIPES.items():
        assert recipe.name == name
        assert recipe.refs
        assert recipe.base is None or recipe.base in images.RECIPES
    assert oci.DEFAULT_PATH.startswith("/usr/local/sbin")


def test_pko_key_covers_the_build_context_but_not_the_readme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pko's image is rebuilt for an edit to what goes into it (here the controllers), never for the README: the
    Dockerfile writes a stub in its place and .dockerignore leaves it out of the context (issue #27)."""
    root = Path(__file__).resolve().parents[3]
    checkout = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("src", "tools/agent-bin"):
        shutil.copytree(root / name, checkout / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md", "Dockerfile", ".dockerignore"):
        shutil.copyfile(root / name, checkout / name)
    monkeypatch.setattr(images, "repo_root", lambda: checkout)
    recipe = images.RECIPES["pko"]
    first = recipe.inputs(_base())
    (checkout / "README.md").write_text("# a rewritten README\n")
    assert recipe.inputs(_base()) == first, "an edit to README.md changed pko's image key"
    controllers = checkout / "src/pko/controllers/stack/__init__.py"
    controllers.write_text(controllers.read_text() + "\n# an edit\n")
    assert recipe.inputs(_base()) != first, "the operator's code is in the image"
