"""The Pulumi CLI's own commands on the official Python language host (built from ../shared by `make tools`).

A Python program with stack config (plain and secret), outputs and a `pulumi.dynamic` resource that writes a
file (and deletes it on delete) goes through install, preview, up, stack output, refresh and destroy with the
CLI; a program that raises must fail the update with its own message. (The Automation API path is covered by
test_pulumi_automation.py.)
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.pulumi, pytest.mark.timeout(600)]

PROGRAM = """
import os

import pulumi
from pulumi.dynamic import CreateResult, Resource, ResourceProvider


class FileProvider(ResourceProvider):
    def create(self, props):
        with open(props["path"], "w") as f:
            f.write(props["content"])
        return CreateResult(id_=props["path"], outs=props)

    def delete(self, id, props):
        os.remove(id)


class File(Resource):
    path: pulumi.Output[str]

    def __init__(self, name, path, content, opts=None):
        super().__init__(FileProvider(), name, {"path": path, "content": content}, opts)


config = pulumi.Config()
if config.get_bool("fail"):
    raise RuntimeError("boom from the program")
marker = File("marker", config.require("path"), config.require_secret("content"))
pulumi.export("greeting", f"hello {config.require('name')}")
pulumi.export("secret", config.require_secret("content"))
pulumi.export("path", marker.path)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    (path / "Pulumi.yaml").write_text("name: langhost-smoke\nruntime: python\n")
    (path / "__main__.py").write_text(PROGRAM)
    return path


def pulumi(
    env: dict[str, str], cwd: Path, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Runs the CLI; unless `check` is False, a failure fails the test with the CLI's output."""
    cmd = ["pulumi", *args, "--non-interactive"]
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def test_cli_flow(pulumi_env: dict[str, str], project: Path, tmp_path: Path) -> None:
    marker = tmp_path / "marker.txt"
    pulumi(pulumi_env, project, "install")
    pulumi(pulumi_env, project, "stack", "init", "dev")
    pulumi(pulumi_env, project, "config", "set", "name", "world")
    pulumi(pulumi_env, project, "config", "set", "path", str(marker))
    pulumi(pulumi_env, project, "config", "set", "--secret", "content", "s3cr3t")

    preview = pulumi(pulumi_env, project, "preview")
    assert "to create" in preview.stdout
    assert not marker.exists()

    pulumi(pulumi_env, project, "up", "--yes")
    assert marker.read_text() == "s3cr3t"
    outputs = json.loads(pulumi(pulumi_env, project, "stack", "output", "--json", "--show-secrets").stdout)
    assert outputs == {"greeting": "hello world", "secret": "s3cr3t", "path": str(marker)}
    hidden = json.loads(pulumi(pulumi_env, project, "stack", "output", "--json").stdout)
    assert hidden["secret"] == "[secret]"

    pulumi(pulumi_env, project, "refresh", "--yes")
    pulumi(pulumi_env, project, "destroy", "--yes")
    assert not marker.exists()


def test_cli_program_error(pulumi_env: dict[str, str], project: Path, tmp_path: Path) -> None:
    pulumi(pulumi_env, project, "stack", "init", "dev")
    config = {"name": "world", "path": str(tmp_path / "marker.txt"), "content": "c", "fail": "true"}
    for key, value in config.items():
        pulumi(pulumi_env, project, "config", "set", key, value)
    result = pulumi(pulumi_env, project, "up", "--yes", check=False)
    assert result.returncode != 0
    assert "boom from the program" in result.stdout + result.stderr
