"""The buildah store is kept between builds (issue #27): builds use the layer cache, a base image already in the
store is not loaded again, and only working containers are removed, unless the cache has grown past its bound.
Checked against a stand-in `buildah` on PATH that records its command lines."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pko.testing.buildah import Buildah

FAKE = """#!/bin/sh
# Records the command line (without the storage options) and answers like buildah would.
while [ "${1#--}" != "$1" ]; do shift 2; done
echo "$*" >> "$FAKE_LOG"
case "$1" in
  images) if [ "$2" = "--all" ]; then seq "$FAKE_IMAGE_COUNT"; elif [ -f "$FAKE_STATE/tagged" ]; then
            echo "sha256:$(cat "$FAKE_STATE/tagged")"; fi ;;
  pull) echo "Getting image source signatures"; cat "$FAKE_STATE/next-id" ;;
  tag) echo "$2" > "$FAKE_STATE/tagged" ;;
  rmi) rm -f "$FAKE_STATE/tagged" ;;
esac
"""


@pytest.fixture
def buildah(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Buildah, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "buildah").write_text(FAKE)
    (bin_dir / "buildah").chmod(0o755)
    state = tmp_path / "fake"
    state.mkdir()
    (state / "next-id").write_text("a" * 64 + "\n")
    log = tmp_path / "calls.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("FAKE_STATE", str(state))
    monkeypatch.setenv("FAKE_IMAGE_COUNT", "3")
    return Buildah(tmp_path / "store", lambda _: None), log


def _calls(log: Path) -> list[str]:
    calls = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return calls


def test_builds_use_the_layer_cache(buildah: tuple[Buildah, Path], tmp_path: Path) -> None:
    tool, log = buildah
    tool.build(tmp_path, tmp_path / "Dockerfile", "example/image:dev")
    (call,) = _calls(log)
    assert call.startswith("bud ")
    assert "--layers=true" in call.split()


def test_a_loaded_base_is_not_loaded_again(buildah: tuple[Buildah, Path], tmp_path: Path) -> None:
    tool, log = buildah
    archive = tmp_path / "base.tar"
    tool.load(archive, "docker.io/library/python:3.11", "sha256:" + "1" * 64)
    assert [c.split()[0] for c in _calls(log)] == ["pull", "tag"]
    tool.load(archive, "docker.io/library/python:3.11", "sha256:" + "1" * 64)
    assert [c.split()[0] for c in _calls(log)] == ["images"], "the same base image is in the store already"
    tool.load(archive, "docker.io/library/python:3.11", "sha256:" + "2" * 64)
    assert [c.split()[0] for c in _calls(log)] == ["pull", "tag"], "a new base image is loaded"
    assert json.loads((tmp_path / "store" / "loaded.json").read_text()) == {
        "docker.io/library/python:3.11": "sha256:" + "2" * 64 + " " + "a" * 64
    }


def test_a_base_gone_from_the_store_is_loaded_again(buildah: tuple[Buildah, Path], tmp_path: Path) -> None:
    tool, log = buildah
    tool.load(tmp_path / "base.tar", "base:1", "sha256:" + "1" * 64)
    tool.reset()
    _calls(log)
    tool.load(tmp_path / "base.tar", "base:1", "sha256:" + "1" * 64)
    assert "pull" in [c.split()[0] for c in _calls(log)]


def test_prepare_keeps_the_cache_within_its_bound(
    buildah: tuple[Buildah, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    tool, log = buildah
    tool.prepare(max_images=3)
    assert _calls(log) == ["rm --all", "images --all --quiet --no-trunc"], "only working containers go"
    monkeypatch.setenv("FAKE_IMAGE_COUNT", "4")
    tool.prepare(max_images=3)
    assert _calls(log) == ["rm --all", "images --all --quiet --no-trunc", "rm --all", "rmi --all --force"]
