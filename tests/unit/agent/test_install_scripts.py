"""Which install scripts of a dependency-cache tree the pod still runs: only a Pulumi provider package's plugin script
naming the plugin its package names, and protobufjs's warning, are left out — each recognised by its command and
its file's digest; any other script, file, stage or doubt runs as ``npm ci`` would run it."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from pko.agent import installscripts
from pko.depcache import npmtree

PLUGIN_JS = b"// a provider package's plugin script, as published\nprocess.exit(0);\n"
POSTINSTALL_JS = b"// protobufjs's version-range warning, as published\n"


@pytest.fixture(autouse=True)
def _published(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's stand-ins for the two published files are the digests seen (the real ones are checked against
    the mirror's packages in the integration tier)."""
    monkeypatch.setattr(installscripts, "PLUGIN_SCRIPT_DIGESTS",
                        installscripts.PLUGIN_SCRIPT_DIGESTS | {hashlib.sha256(PLUGIN_JS).hexdigest()})
    monkeypatch.setattr(installscripts, "PROTOBUFJS_POSTINSTALL_DIGESTS",
                        installscripts.PROTOBUFJS_POSTINSTALL_DIGESTS | {hashlib.sha256(POSTINSTALL_JS).hexdigest()})


def _kubernetes(**extra: Any) -> dict[str, Any]:
    return {"name": "@pulumi/kubernetes", "version": "4.24.1", "pulumi": {"resource": True, "name": "kubernetes"},
            "scripts": {"build": "tsc", "install": "node scripts/install-pulumi-plugin.js resource kubernetes 4.24.1"},
            **extra}


def _protobufjs(**extra: Any) -> dict[str, Any]:
    return {"name": "protobufjs", "version": "7.6.6", "versionScheme": "~",
            "scripts": {"test": "tape", "postinstall": "node scripts/postinstall"}, **extra}


def _tree(tmp_path: Path, manifests: dict[str, dict[str, Any]],
          files: dict[str, bytes] | None = None) -> tuple[Path, npmtree.Tree]:
    workdir = tmp_path / "program"
    packages: dict[str, Any] = {"": {"name": "app"}}
    for path, manifest in manifests.items():
        (workdir / path / "scripts").mkdir(parents=True)
        (workdir / path / "package.json").write_text(json.dumps(manifest))
        if manifest["name"] == "protobufjs":
            (workdir / path / "scripts" / "postinstall.js").write_bytes(POSTINSTALL_JS)
        else:
            (workdir / path / "scripts" / "install-pulumi-plugin.js").write_bytes(PLUGIN_JS)
        packages[path] = {"version": manifest["version"], "hasInstallScript": True,
                          "integrity": "sha512-" + base64.b64encode(hashlib.sha512(path.encode()).digest()).decode()}
    for path, data in (files or {}).items():
        (workdir / path).write_bytes(data)
    lockfile = {"name": "app", "lockfileVersion": 3, "packages": packages}
    return workdir, npmtree.plan(json.dumps(lockfile).encode())


def test_the_two_published_scripts_every_pulumi_program_carries_are_left_out(tmp_path: Path) -> None:
    workdir, tree = _tree(tmp_path, {"node_modules/@pulumi/kubernetes": _kubernetes(),
                                     "node_modules/protobufjs": _protobufjs()})
    assert [p.folder for p in tree.packages if p.install_script] == ["@pulumi/kubernetes", "protobufjs"]
    plan = installscripts.plan(workdir, tree, {})
    assert plan.rebuild == ()
    assert dict(plan.left_out) == {
        "@pulumi/kubernetes": "its script installs the plugin resource-kubernetes-v4.24.1, which the CLI's plugin "
                              "step installs",
        "protobufjs": "protobufjs's postinstall only warns about a parent's version range"}


@pytest.mark.parametrize(("manifest", "files"), [
    # another command, or the plugin its package names is another
    (_kubernetes(scripts={"install": "node scripts/install-pulumi-plugin.js resource kubernetes 4.24.0"}), {}),
    (_kubernetes(scripts={"install": "node scripts/install-pulumi-plugin.js resource kubernetes 4.24.1 && rm -rf x"}),
     {}),
    (_kubernetes(pulumi={"resource": True, "name": "k8s"}), {}),
    (_kubernetes(pulumi={"resource": True, "name": "kubernetes",
                         "parameterization": {"name": "x", "version": "1.0.0", "value": "e30="}}), {}),
    # a stage beside it, or npm's implicit node-gyp build
    (_kubernetes(scripts={"preinstall": "node setup.js",
                          "install": "node scripts/install-pulumi-plugin.js resource kubernetes 4.24.1"}), {}),
    (_kubernetes(), {"node_modules/@pulumi/kubernetes/binding.gyp": b"{}"}),
    # the file is not the published one
    (_kubernetes(), {"node_modules/@pulumi/kubernetes/scripts/install-pulumi-plugin.js": b"require('./evil')"}),
    # a package.json that is not the lockfile's package, or not readable
    (_kubernetes(name="@acme/kubernetes"), {}),
    (_kubernetes(), {"node_modules/@pulumi/kubernetes/package.json": b"{not json"}),
])
def test_any_other_script_or_doubt_runs(tmp_path: Path, manifest: dict[str, Any], files: dict[str, bytes]) -> None:
    workdir, tree = _tree(tmp_path, {"node_modules/@pulumi/kubernetes": manifest}, files)
    assert installscripts.plan(workdir, tree, {}) == installscripts.Plan(("@pulumi/kubernetes",), ())


@pytest.mark.parametrize(("manifest", "files"), [
    (_protobufjs(scripts={"postinstall": "node scripts/postinstall && node build.js"}), {}),
    (_protobufjs(scripts={"install": "node-gyp rebuild", "postinstall": "node scripts/postinstall"}), {}),
    (_protobufjs(), {"node_modules/protobufjs/scripts/postinstall.js": b"require('fs').writeFileSync('x', '')"}),
    (_protobufjs(), {"node_modules/protobufjs/binding.gyp": b"{}"}),
])
def test_protobufjs_runs_unless_its_postinstall_is_the_published_warning(
        tmp_path: Path, manifest: dict[str, Any], files: dict[str, bytes]) -> None:
    workdir, tree = _tree(tmp_path, {"node_modules/protobufjs": manifest}, files)
    assert installscripts.plan(workdir, tree, {}).rebuild == ("protobufjs",)


def test_a_plugin_script_runs_when_automatic_plugin_acquisition_is_off(tmp_path: Path) -> None:
    """Then the CLI's plugin step may not install what the script would: the script is the user's way."""
    workdir, tree = _tree(tmp_path, {"node_modules/@pulumi/kubernetes": _kubernetes(),
                                     "node_modules/protobufjs": _protobufjs()})
    plan = installscripts.plan(workdir, tree, {"PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true"})
    assert plan.rebuild == ("@pulumi/kubernetes",)
    assert [folder for folder, _ in plan.left_out] == ["protobufjs"]


def test_a_folder_name_that_must_run_once_runs_for_every_copy(tmp_path: Path) -> None:
    """``npm rebuild`` matches by folder name: a nested copy whose script must run takes the other copy along, and
    that one is then not reported as left out."""
    workdir, tree = _tree(tmp_path, {
        "node_modules/protobufjs": _protobufjs(),
        "node_modules/@grpc/proto-loader/node_modules/protobufjs": _protobufjs(version="6.11.4"),
    }, {"node_modules/@grpc/proto-loader/node_modules/protobufjs/scripts/postinstall.js": b"// another file"})
    assert installscripts.plan(workdir, tree, {}) == installscripts.Plan(("protobufjs",), ())
