"""The krew manifest of `kubectl pko` (:mod:`pko.deploy.krew`): one version, one platform per archive named as
tools/kubectl-pko/build.sh names it, each pinned by the checksum of its bytes, in the shape krew's validation wants."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from pko.deploy import krew


def _archive(tmp_path: Path, name: str, content: bytes = b"archive") -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def test_each_archive_is_a_platform_pinned_by_its_checksum(tmp_path: Path) -> None:
    linux = _archive(tmp_path, "kubectl-pko_v0.1.0_linux_amd64.tar.gz", b"linux")
    arm = _archive(tmp_path, "kubectl-pko_v0.1.0_linux_arm64.tar.gz", b"arm")
    text = krew.render([krew.archive(p, "https://example.invalid/releases/v0.1.0/") for p in (arm, linux)])
    plugin = yaml.safe_load(text)
    assert (plugin["apiVersion"], plugin["kind"], plugin["metadata"]["name"]) == (
        "krew.googlecontainertools.github.com/v1alpha2", "Plugin", "pko")
    spec = plugin["spec"]
    assert spec["version"] == "v0.1.0"
    assert "\n" not in spec["shortDescription"]
    assert [p["selector"]["matchLabels"] for p in spec["platforms"]] == [
        {"os": "linux", "arch": "amd64"}, {"os": "linux", "arch": "arm64"}]
    first = spec["platforms"][0]
    assert first["uri"] == "https://example.invalid/releases/v0.1.0/kubectl-pko_v0.1.0_linux_amd64.tar.gz"
    assert first["sha256"] == hashlib.sha256(b"linux").hexdigest()
    assert (first["bin"], first["files"]) == ("kubectl-pko", [{"from": "kubectl-pko", "to": "."}])


@pytest.mark.parametrize("name", ["kubectl-pko_0.1.0_linux_amd64.tar.gz", "kubectl-pko_v0.1.0_linux.tar.gz",
                                  "pko_v0.1.0_linux_amd64.tar.gz", "kubectl-pko_v0.1.0_linux_amd64.zip"])
def test_an_archive_named_otherwise_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(krew.ArchiveNameError, match="not an archive name"):
        krew.archive(_archive(tmp_path, name), "https://example.invalid")


def test_one_version_and_one_archive_per_platform(tmp_path: Path) -> None:
    one = krew.archive(_archive(tmp_path, "kubectl-pko_v0.1.0_linux_amd64.tar.gz"), "u")
    other = krew.archive(_archive(tmp_path, "kubectl-pko_v0.2.0_darwin_arm64.tar.gz"), "u")
    with pytest.raises(ValueError, match="one version"):
        krew.manifest([one, other])
    with pytest.raises(ValueError, match="one archive per platform"):
        krew.manifest([one, one])
    with pytest.raises(ValueError, match="none"):
        krew.manifest([])


def test_the_command_writes_the_manifest_or_says_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               ) -> None:
    good = _archive(tmp_path, "kubectl-pko_v0.1.0_linux_amd64.tar.gz")
    assert krew.main(["--uri-base", "https://example.invalid", str(good)]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["spec"]["version"] == "v0.1.0"
    assert krew.main(["--uri-base", "https://example.invalid", str(tmp_path / "missing.tar.gz")]) == 1
    assert "not an archive name" in capsys.readouterr().err
