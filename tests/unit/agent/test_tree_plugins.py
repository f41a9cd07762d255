"""Which plugins a tree's packages name, as the Node.js language host names them, and when the agent may skip the
CLI's plugin install: only with every one of them in the plugins folder and nothing else the host would find."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from pko.agent import treeplugins
from pko.depcache import npmtree


def _sri(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


MANIFESTS: dict[str, dict[str, Any]] = {
    "node_modules/@pulumi/random": {"name": "@pulumi/random", "version": "4.19.1",
                                    "pulumi": {"resource": True, "name": "random"}},
    "node_modules/@pulumi/kubernetes": {"name": "@pulumi/kubernetes", "version": "4.24.1",
                                        "pulumi": {"resource": True}},  # named after its scope
    "node_modules/@acme/things": {"name": "@acme/things", "version": "0.3.0",
                                  "pulumi": {"resource": True, "name": "things", "version": "v1.2.3"}},
    "node_modules/@pulumi/pulumi": {"name": "@pulumi/pulumi", "version": "3.259.0"},  # no plugin
    "node_modules/typescript": {"name": "typescript", "version": "5.9.3", "pulumi": {"resource": False}},
}
FOLDERS = ["resource-random-v4.19.1", "resource-kubernetes-v4.24.1", "resource-things-v1.2.3"]


def _project(tmp_path: Path, manifests: dict[str, dict[str, Any]]) -> tuple[Path, npmtree.Tree, Path]:
    workdir = tmp_path / "program"
    packages = {}
    for path, manifest in manifests.items():
        (workdir / path).mkdir(parents=True)
        (workdir / path / "package.json").write_text(json.dumps(manifest))
        packages[path] = {"version": manifest["version"], "integrity": _sri(path.encode())}
    (workdir / "index.ts").write_text("export {};\n")
    (workdir / "src").mkdir()
    (workdir / "src" / "util.ts").write_text("export {};\n")
    lockfile = {"name": "app", "lockfileVersion": 3, "packages": {"": {"name": "app"}, **packages}}
    plugins = tmp_path / "home" / "plugins"
    plugins.mkdir(parents=True)
    return workdir, npmtree.plan(json.dumps(lockfile).encode()), plugins


def test_plugins_are_named_as_the_language_host_names_them(tmp_path: Path) -> None:
    workdir, tree, _ = _project(tmp_path, MANIFESTS)
    found = treeplugins.named(workdir / p.path / "package.json" for p in tree.packages)
    assert sorted(f for f in found if f is not None) == sorted(FOLDERS)


@pytest.mark.parametrize("section", [
    {"resource": True, "name": "things", "parameterization": {"name": "x", "version": "1.0.0", "value": "e30="}},
    {"resource": True},  # a third-party package must name its plugin: the host cannot derive it
])
def test_a_package_named_in_a_way_not_followed_is_unsure(tmp_path: Path, section: dict[str, Any]) -> None:
    manifest = tmp_path / "package.json"
    manifest.write_text(json.dumps({"name": "@acme/things", "version": "0.3.0", "pulumi": section}))
    assert list(treeplugins.named([manifest])) == [None]


def test_the_install_is_skipped_only_with_every_plugin_there_and_nothing_else_to_find(tmp_path: Path) -> None:
    workdir, tree, plugins = _project(tmp_path, MANIFESTS)
    project = {"name": "app", "runtime": "nodejs"}
    assert treeplugins.missing(workdir, project, tree, {}, plugins) in FOLDERS
    for folder in FOLDERS:
        (plugins / folder).mkdir()
    assert treeplugins.missing(workdir, project, tree, {}, plugins) is None
    (plugins / f"{FOLDERS[1]}.partial").touch()  # the CLI's mark of an install that did not finish
    assert treeplugins.missing(workdir, project, tree, {}, plugins) == FOLDERS[1]
    (plugins / f"{FOLDERS[1]}.partial").unlink()

    assert treeplugins.missing(workdir, {**project, "plugins": {"providers": [{"name": "x", "path": "."}]}},
                               tree, {}, plugins) == "Pulumi.yaml lists plugins or packages"
    assert treeplugins.missing(workdir, {**project, "packages": {"x": "github.com/acme/x"}},
                               tree, {}, plugins) == "Pulumi.yaml lists plugins or packages"
    assert treeplugins.missing(workdir, project, tree, {"PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true"},
                               plugins) == "automatic plugin acquisition is off"

    (workdir / "src" / "node_modules").mkdir()  # the host would walk into it
    assert "another node_modules folder" in str(treeplugins.missing(workdir, project, tree, {}, plugins))
    (workdir / "src" / "node_modules").rmdir()
    (workdir / "src" / "vendored").symlink_to(tmp_path)
    assert "is a link" in str(treeplugins.missing(workdir, project, tree, {}, plugins))
    (workdir / "src" / "vendored").unlink()
    assert treeplugins.missing(workdir, project, tree, {}, plugins) is None

    (workdir / "node_modules" / "@pulumi" / "random" / "package.json").write_text("{not json")
    assert str(treeplugins.missing(workdir, project, tree, {}, plugins)).startswith("JSONDecodeError")
