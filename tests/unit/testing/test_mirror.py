"""The package mirror's URL mapping: what npm, pip, the Go tool and the Pulumi CLI get for each path they ask."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from pko.testing import mirror


@pytest.fixture
def served(tmp_path: Path) -> mirror.Mirror:
    plugins = tmp_path / "bin"
    plugins.mkdir()
    (plugins / "pulumi-resource-random-v4.19.1-linux-amd64.tar.gz").write_bytes(b"plugin")
    (plugins / "kube-apiserver").write_bytes(b"not a plugin")
    npm = tmp_path / "npm"
    (npm / "packuments" / "@pulumi").mkdir(parents=True)
    (npm / "tarballs" / "@pulumi" / "random").mkdir(parents=True)
    (npm / "tarballs" / "@pulumi" / "random" / "random-4.19.1.tgz").write_bytes(b"tgz")
    manifest = {"name": "@pulumi/random", "version": "4.19.1", "dist": {"integrity": "sha512-x", "shasum": "y"}}
    (npm / "packuments" / "@pulumi" / "random.json").write_text(json.dumps({
        "4.19.1": manifest, "4.9.0": {**manifest, "version": "4.9.0"}, "4.20.0-alpha.1": {**manifest}}))
    pypi = tmp_path / "pypi"
    (pypi / "files").mkdir(parents=True)
    (pypi / "files" / "pulumi_random-4.19.1-py3-none-any.whl").write_bytes(b"wheel")
    (pypi / "files" / "pulumi-3.259.0-py3-none-any.whl").write_bytes(b"sdk")
    go = tmp_path / "go"
    (go / "proxy" / "github.com" / "pulumi" / "pulumi" / "sdk" / "v3" / "@v").mkdir(parents=True)
    (go / "proxy" / "github.com" / "pulumi" / "pulumi" / "sdk" / "v3" / "@v" / "v3.259.0.mod").write_text("module x")
    for part in (npm, pypi, go):
        (part / ".complete").touch()
    return mirror.Mirror("127.0.0.1", 8080, plugins=plugins, npm=npm, pypi=pypi, go=go)


def test_a_plugin_is_served_by_its_release_file_name_and_nothing_else_of_the_bin_directory(
        served: mirror.Mirror) -> None:
    part, status, _, body = served.resolve("/plugins/pulumi-resource-random-v4.19.1-linux-amd64.tar.gz")
    assert (part, status) == ("plugins", 200)
    assert isinstance(body, Path)
    assert body.read_bytes() == b"plugin"
    assert served.resolve("/plugins/pulumi-resource-random-v4.99.0-linux-amd64.tar.gz")[1] == 404
    assert served.resolve("/plugins/kube-apiserver")[1] == 404
    assert served.resolve("/plugins/..%2Fkube-apiserver")[1] == 404


def test_a_packument_points_its_tarballs_back_at_the_mirror_and_tags_the_newest_release(
        served: mirror.Mirror) -> None:
    for path in ("/npm/@pulumi/random", "/npm/@pulumi%2frandom"):
        part, status, ctype, body = served.resolve(path)
        assert (part, status, ctype) == ("npm", 200, "application/json")
        assert isinstance(body, bytes)
        packument = json.loads(body)
        assert packument["dist-tags"] == {"latest": "4.19.1"}  # not 4.9.0 (string order), not the pre-release
        assert (packument["versions"]["4.19.1"]["dist"]["tarball"]
                == "http://127.0.0.1:8080/npm/@pulumi/random/-/random-4.19.1.tgz")
        assert packument["versions"]["4.19.1"]["dist"]["integrity"] == "sha512-x"
    assert served.resolve("/npm/@pulumi/random/-/random-4.19.1.tgz")[1] == 200
    assert served.resolve("/npm/left-pad")[1] == 404
    assert served.resolve("/npm/@pulumi/random/-/../../../../pypi/files/x")[1] == 404


def test_the_simple_index_lists_a_project_under_its_normalized_name_with_sha256_fragments(
        served: mirror.Mirror) -> None:
    _, status, _, body = served.resolve("/pypi/simple/Pulumi.Random/")
    assert status == 200
    assert isinstance(body, bytes)
    digest = hashlib.sha256(b"wheel").hexdigest()
    assert f'href="../../files/pulumi_random-4.19.1-py3-none-any.whl#sha256={digest}"' in body.decode()
    assert "pulumi-3.259.0" not in body.decode()  # `pulumi` is a project of its own
    _, status, _, index = served.resolve("/pypi/simple/")
    assert status == 200
    assert isinstance(index, bytes)
    assert 'href="pulumi-random/"' in index.decode()
    assert 'href="pulumi/"' in index.decode()
    assert served.resolve("/pypi/simple/numpy/")[1] == 404
    assert served.resolve("/pypi/files/pulumi_random-4.19.1-py3-none-any.whl")[1] == 200


def test_go_modules_come_from_the_download_cache_layout(served: mirror.Mirror) -> None:
    assert served.resolve("/go/github.com/pulumi/pulumi/sdk/v3/@v/v3.259.0.mod")[1] == 200
    assert served.resolve("/go/github.com/pulumi/pulumi/sdk/v3/@v/v3.999.0.mod")[1] == 404
    assert served.resolve("/go/../npm/.complete")[1] == 404


def test_an_unfilled_part_says_so_instead_of_pretending_a_package_is_missing(served: mirror.Mirror) -> None:
    (served.npm / ".complete").unlink()
    part, status, _, body = served.resolve("/npm/@pulumi/random")
    assert (part, status) == ("npm", 503)
    assert b"make tools" in body


def test_pods_are_pointed_at_the_mirror_the_way_users_configure_their_tools(served: mirror.Mirror) -> None:
    env = served.env()
    overrides = dict(pair.split("=", 1) for pair in env["PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES"].split(","))
    assert overrides == {"^github://api.github.com/pulumi$": "http://127.0.0.1:8080/plugins",
                         "^https://get.pulumi.com/releases/plugins/?$": "http://127.0.0.1:8080/plugins"}
    assert env["NPM_CONFIG_REGISTRY"] == "http://127.0.0.1:8080/npm/"
    assert env["PIP_INDEX_URL"] == "http://127.0.0.1:8080/pypi/simple/"
    assert env["PIP_TRUSTED_HOST"] == "127.0.0.1"
    assert env["GOPROXY"] == "http://127.0.0.1:8080/go"
