"""Smoke test of pko's Python language host (tools/langhost/pulumi-language-python) with the real Pulumi CLI.

A Python program with stack config (plain and secret), outputs and a `pulumi.dynamic` resource that writes a
file (and deletes it on delete) goes through preview, up, stack output, refresh and destroy, first with the
CLI and then through the Automation API; a program that raises must fail the update with its own message.

Binaries come from $PKO_BIN_DIR (default ~/.cache/pko/bin, filled by tools/build.sh). State, secrets and the
Pulumi home live in the test's temporary directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pulumi import automation as auto

pytestmark = [pytest.mark.pulumi, pytest.mark.timeout(600)]

BIN_DIR = Path(os.environ.get("PKO_BIN_DIR", Path.home() / ".cache" / "pko" / "bin"))
NEEDED = ["pulumi", "pulumi-language-python", "pulumi-language-python-exec", "pulumi-resource-pulumi-python"]

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
def langhost_env(tmp_path: Path) -> dict[str, str]:
    missing = [name for name in NEEDED if not (BIN_DIR / name).exists()]
    if missing:
        message = f"{', '.join(missing)} missing in {BIN_DIR} (set PKO_BIN_DIR or run tools/build.sh)"
        pytest.fail(message, pytrace=False)
    (tmp_path / "home").mkdir()
    (tmp_path / "state").mkdir()
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(BIN_DIR), str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(
        PULUMI_HOME=str(tmp_path / "home"),
        PULUMI_BACKEND_URL=f"file://{tmp_path / 'state'}",
        PULUMI_CONFIG_PASSPHRASE="x",
        PULUMI_SKIP_UPDATE_CHECK="true",
        PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
    )
    return env


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


def test_cli_flow(langhost_env: dict[str, str], project: Path, tmp_path: Path) -> None:
    marker = tmp_path / "marker.txt"
    pulumi(langhost_env, project, "install")
    pulumi(langhost_env, project, "stack", "init", "dev")
    pulumi(langhost_env, project, "config", "set", "name", "world")
    pulumi(langhost_env, project, "config", "set", "path", str(marker))
    pulumi(langhost_env, project, "config", "set", "--secret", "content", "s3cr3t")

    preview = pulumi(langhost_env, project, "preview")
    assert "to create" in preview.stdout
    assert not marker.exists()

    pulumi(langhost_env, project, "up", "--yes")
    assert marker.read_text() == "s3cr3t"
    outputs = json.loads(pulumi(langhost_env, project, "stack", "output", "--json", "--show-secrets").stdout)
    assert outputs == {"greeting": "hello world", "secret": "s3cr3t", "path": str(marker)}
    hidden = json.loads(pulumi(langhost_env, project, "stack", "output", "--json").stdout)
    assert hidden["secret"] == "[secret]"

    pulumi(langhost_env, project, "refresh", "--yes")
    pulumi(langhost_env, project, "destroy", "--yes")
    assert not marker.exists()


def test_cli_program_error(langhost_env: dict[str, str], project: Path, tmp_path: Path) -> None:
    pulumi(langhost_env, project, "stack", "init", "dev")
    config = {"name": "world", "path": str(tmp_path / "marker.txt"), "content": "c", "fail": "true"}
    for key, value in config.items():
        pulumi(langhost_env, project, "config", "set", key, value)
    result = pulumi(langhost_env, project, "up", "--yes", check=False)
    assert result.returncode != 0
    assert "boom from the program" in result.stdout + result.stderr


def test_automation_api_flow(
    langhost_env: dict[str, str], project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in langhost_env.items():
        monkeypatch.setenv(key, value)  # the Automation API runs `pulumi` from PATH with our environment
    marker = tmp_path / "marker.txt"
    stack = auto.create_stack("dev", work_dir=str(project))
    stack.set_all_config(
        {
            "name": auto.ConfigValue("automation"),
            "path": auto.ConfigValue(str(marker)),
            "content": auto.ConfigValue("t0p", secret=True),
        }
    )

    stack.preview()
    events: list[auto.EngineEvent] = []
    result = stack.up(on_event=events.append)
    assert result.summary.result == "succeeded"
    assert result.outputs["greeting"].value == "hello automation"
    assert result.outputs["secret"].value == "t0p"
    assert result.outputs["secret"].secret
    assert marker.read_text() == "t0p"
    assert any(e.resource_pre_event is not None for e in events)
    assert any(e.summary_event is not None for e in events)

    stack.refresh()
    stack.destroy()
    assert not marker.exists()

    stack.set_config("fail", auto.ConfigValue("true"))
    with pytest.raises(auto.errors.CommandError) as failure:
        stack.up()
    assert "boom from the program" in str(failure.value)
