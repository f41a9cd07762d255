"""Skipping `pulumi install` for a YAML program whose plugins were installed before (pko.agent.yamlinstall)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pko.agent import yamlinstall
from pko.agent.project import read_project

YAML = {"name": "p", "runtime": "yaml"}


def _program(root: Path, body: str = "outputs:\n  x: 1\n") -> Path:
    root.mkdir(parents=True)
    (root / "Pulumi.yaml").write_text(f"name: p\nruntime: yaml\n{body}")
    return root


def _digest(program: Path, cli: str = "3.259.0") -> str | None:
    return yamlinstall.inputs_digest(program, read_project(program), cli)


def test_the_digest_follows_the_program_and_the_cli_but_not_names_stack_settings_or_git(tmp_path: Path) -> None:
    one = _program(tmp_path / "one")
    two = _program(tmp_path / "two")
    first = _digest(one)
    assert first is not None
    assert first == _digest(two)
    (two / "Pulumi.dev.yaml").write_text("config:\n  p:a: b\n")
    (two / ".git").mkdir()
    (two / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    assert _digest(two) == first
    # another Program of the same body: only its name differs
    (two / "Pulumi.yaml").write_text("name: other\ndescription: the same\nruntime: yaml\noutputs:\n  x: 1\n")
    assert _digest(two) == first
    assert _digest(one, "3.260.0") != first
    (two / "Main.yaml").write_text("resources: {}\n")
    assert _digest(two) != first
    three = _program(tmp_path / "three", "resources:\n  r:\n    type: random:RandomInteger\noutputs:\n  x: 1\n")
    assert _digest(three) != first


def test_a_checkout_too_large_to_digest_is_never_read_into_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file of gigabytes beside the program (a data dump in the repository): no digest, and no read of it (the
    agent would be killed for it at every start)."""
    program = _program(tmp_path / "p")
    with (program / "dump.bin").open("wb") as dump:
        dump.truncate(4 << 30)  # sparse: 4 GB that take no disk
    read: list[Path] = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: read.append(self) or real(self))
    assert _digest(program) is None
    assert program / "dump.bin" not in read


def test_only_yaml_programs_with_a_known_cli_have_one(tmp_path: Path) -> None:
    program = _program(tmp_path / "p")
    assert yamlinstall.inputs_digest(program, {"name": "p", "runtime": "nodejs"}, "3.259.0") is None
    assert yamlinstall.inputs_digest(program, {"name": "p", "runtime": {"name": "python"}}, "3.259.0") is None
    assert yamlinstall.inputs_digest(program, {"name": "p", "runtime": {"name": "yaml"}}, "3.259.0") is not None
    assert yamlinstall.inputs_digest(program, YAML, "") is None


def test_a_noted_install_is_skipped_while_its_plugins_are_all_there(tmp_path: Path) -> None:
    env = {"PULUMI_HOME": str(tmp_path / "home")}
    plugins = yamlinstall.plugins_dir(env)
    assert plugins == tmp_path / "home" / "plugins"
    assert not yamlinstall.installed(env, "d1")
    (plugins / "resource-random-v4.19.1").mkdir(parents=True)
    yamlinstall.note(env, "d1")
    assert yamlinstall.installed(env, "d1")
    assert not yamlinstall.installed(env, "d2")
    (plugins / "resource-random-v4.19.1.partial").write_text("")  # a plugin the CLI is (re)installing
    assert not yamlinstall.installed(env, "d1")
    (plugins / "resource-random-v4.19.1.partial").unlink()
    (plugins / "resource-random-v4.19.1").rmdir()  # removed since
    assert not yamlinstall.installed(env, "d1")


def test_a_bad_note_means_installing_and_the_note_keeps_the_newest(tmp_path: Path) -> None:
    env = {"PULUMI_HOME": str(tmp_path / "home")}
    plugins = yamlinstall.plugins_dir(env)
    plugins.mkdir(parents=True)
    (plugins / yamlinstall.NOTE).write_text("{not json")
    assert not yamlinstall.installed(env, "d1")
    yamlinstall.note(env, "d1")  # written over the bad one
    assert yamlinstall.installed(env, "d1")
    for i in range(yamlinstall.LIMIT + 5):
        yamlinstall.note(env, f"n{i}")
    assert yamlinstall.installed(env, f"n{yamlinstall.LIMIT + 4}")
    assert not yamlinstall.installed(env, "d1")  # the oldest went
    assert [p.name for p in plugins.iterdir() if p.is_file()] == [yamlinstall.NOTE]  # no temporary left
