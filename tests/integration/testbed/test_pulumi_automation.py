"""The test bed's Pulumi CLI is real: `up`, outputs and `destroy` through the Automation API, file backend.

Python programs need the Python language host and the dynamic-provider plugin; YAML programs (what `Program`
objects become) need the YAML host. Both are exercised here with programs that touch the real filesystem.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pulumi import automation as auto

PROGRAMS = Path(__file__).parent / "programs"


@pytest.fixture
def pulumi_process_env(pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The Automation API finds `pulumi` through this process's own environment."""
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    return pulumi_env


def _stack(program: str, tmp_path: Path, env: dict[str, str]) -> auto.Stack:
    work_dir = tmp_path / program
    shutil.copytree(PROGRAMS / program, work_dir)
    return auto.Stack.create("dev", auto.LocalWorkspace(work_dir=str(work_dir), env_vars=env))


def test_python_program_with_dynamic_provider(tmp_path: Path, pulumi_process_env: dict[str, str]) -> None:
    target = tmp_path / "greeting.txt"
    stack = _stack("files-python", tmp_path, pulumi_process_env)
    stack.set_config("path", auto.ConfigValue(str(target)))
    stack.set_config("content", auto.ConfigValue("hello from pulumi"))
    stack.set_config("token", auto.ConfigValue("s3cr3t", secret=True))

    events: list[auto.EngineEvent] = []
    result = stack.up(on_event=events.append)

    assert result.summary.result == "succeeded"
    assert target.read_text() == "hello from pulumi"
    assert result.outputs["path"].value == str(target)
    assert result.outputs["token"].secret is True
    assert result.outputs["token"].value == "s3cr3t"
    assert any(e.res_outputs_event is not None for e in events)

    preview = stack.preview(expect_no_changes=True)
    assert preview.change_summary.get("same") == 2

    destroyed = stack.destroy()
    assert destroyed.summary.result == "succeeded"
    assert not target.exists()


def test_python_program_error_fails_the_update(tmp_path: Path, pulumi_process_env: dict[str, str]) -> None:
    stack = _stack("files-python", tmp_path, pulumi_process_env)  # `path` config missing: config.require raises
    with pytest.raises(auto.CommandError) as failure:
        stack.up()
    assert "Missing required configuration variable 'files-python:path'" in str(failure.value)


def test_yaml_program_config_and_outputs(tmp_path: Path, pulumi_process_env: dict[str, str]) -> None:
    stack = _stack("config-yaml", tmp_path, pulumi_process_env)
    stack.set_config("greeting", auto.ConfigValue("hello"))

    result = stack.up()

    assert result.summary.result == "succeeded"
    assert result.outputs["message"].value == "hello, world"
    assert result.outputs["count"].value == 3
    assert stack.destroy().summary.result == "succeeded"
