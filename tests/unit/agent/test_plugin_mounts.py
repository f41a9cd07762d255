"""Plugins from read-only mounts (pko.agent.pluginmounts): each mounted plugin folder gets a real folder of links in
the CLI's plugins folder, nothing is linked over a plugin already there, and a folder whose mount is gone is removed
so that the CLI installs the plugin again instead of running a dangling link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pko.agent import pluginmounts


def _plugin(folder: Path, binary: str = "pulumi-resource-random") -> Path:
    folder.mkdir(parents=True)
    (folder / binary).write_text("#!/bin/sh\n")
    (folder / binary).chmod(0o755)
    (folder / "LICENSE").write_text("license\n")
    return folder


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"PULUMI_HOME": str(tmp_path / "home"), pluginmounts.ROOT_ENV: str(tmp_path / "mounts")}


@pytest.mark.parametrize(("name", "plugin"), [
    ("resource-random-v4.19.1", True),
    ("resource-kubernetes-v4.24.1-alpha.1+abc", True),
    ("language-yaml-v1.25.0", True),
    ("resource-random-v4.19", False),
    ("random", False),
    ("resource-random-v4.19.1.lock", False),
    ("resource-../x-v1.0.0", False),
])
def test_only_the_clis_names_of_plugin_folders_count(name: str, plugin: bool) -> None:
    assert pluginmounts.is_plugin_folder(name) is plugin


def test_a_mounted_plugin_gets_a_real_folder_of_links(env: dict[str, str], tmp_path: Path) -> None:
    # one image mounted as the plugin's folder itself, one image of two plugins mounted one level up
    single = _plugin(tmp_path / "mounts" / "resource-random-v4.19.1")
    bundle = tmp_path / "mounts" / "cloud"
    _plugin(bundle / "resource-kubernetes-v4.24.1", "pulumi-resource-kubernetes")
    _plugin(bundle / "resource-tls-v5.0.0", "pulumi-resource-tls")
    (bundle / "README").write_text("not a plugin\n")

    linked = pluginmounts.link(env)

    assert sorted(linked) == ["resource-kubernetes-v4.24.1", "resource-random-v4.19.1", "resource-tls-v5.0.0"]
    plugins = tmp_path / "home" / "plugins"
    folder = plugins / "resource-random-v4.19.1"
    # a real folder (the CLI skips links when it lists its plugins), with links to the mounted files
    assert folder.is_dir()
    assert not folder.is_symlink()
    binary = folder / "pulumi-resource-random"
    assert binary.is_symlink()
    assert binary.resolve() == (single / "pulumi-resource-random").resolve()
    assert os.access(binary, os.X_OK)
    assert (folder / "LICENSE").read_text() == "license\n"
    assert not list(plugins.glob("*.partial"))  # the CLI takes it as installed
    assert sorted(p.name for p in plugins.iterdir()) == [
        "resource-kubernetes-v4.24.1", "resource-random-v4.19.1", "resource-tls-v5.0.0"]  # no staging left

    # a second agent start on the same plugins folder keeps what it made
    assert pluginmounts.link(env) == linked
    assert binary.is_symlink()


def test_a_plugin_already_installed_is_left_as_it_is(env: dict[str, str], tmp_path: Path) -> None:
    _plugin(tmp_path / "mounts" / "resource-random-v4.19.1")
    installed = _plugin(tmp_path / "home" / "plugins" / "resource-random-v4.19.1")

    assert pluginmounts.link(env) == []
    binary = installed / "pulumi-resource-random"
    assert binary.is_file()
    assert not binary.is_symlink()


def test_a_folder_whose_mount_is_gone_is_removed(env: dict[str, str], tmp_path: Path) -> None:
    # the plugins folder outlives the pod (a kept share); the next pod mounts no plugin volume
    mounted = _plugin(tmp_path / "mounts" / "resource-random-v4.19.1")
    assert pluginmounts.link(env) == ["resource-random-v4.19.1"]
    for entry in mounted.iterdir():
        entry.unlink()
    mounted.rmdir()

    assert pluginmounts.link(env) == []
    assert not (tmp_path / "home" / "plugins" / "resource-random-v4.19.1").exists()


def test_no_mounts_change_nothing(env: dict[str, str], tmp_path: Path) -> None:
    assert pluginmounts.link(env) == []
    assert not (tmp_path / "home").exists()
    (tmp_path / "mounts").mkdir()
    (tmp_path / "mounts" / "empty").mkdir()
    assert pluginmounts.link(env) == []
    assert not (tmp_path / "home").exists()


def test_an_unwritable_plugins_folder_is_not_an_error(env: dict[str, str], tmp_path: Path) -> None:
    _plugin(tmp_path / "mounts" / "resource-random-v4.19.1")
    (tmp_path / "home").write_text("a file where the folder should be\n")
    assert pluginmounts.link(env) == []


def test_a_plugins_folder_it_cannot_read_is_not_an_error(env: dict[str, str], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # as root nothing is unreadable, so the refusals a non-root agent meets are simulated: the link fails, and so
    # does the look at whether another agent made it meanwhile
    _plugin(tmp_path / "mounts" / "resource-random-v4.19.1")

    def refused(*args: object) -> bool:
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(pluginmounts, "_link", refused)
    monkeypatch.setattr(Path, "is_file", refused)
    assert pluginmounts.link(env) == []
