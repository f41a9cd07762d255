"""A YAML program's `pulumi install` runs once per plugins folder, not once per workspace (pko.agent.yamlinstall):
the `local` runtime gives each workspace a directory of its own but one PULUMI_HOME, and a fleet of one Program
installed the same nothing in each. The real CLI, through a wrapper that notes each `pulumi install`."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from agent_testlib import AgentFactory, drive, noting_cli

from pko.agent import yamlinstall
from pko.protocol.proto import agent_pb2

pytestmark = pytest.mark.pulumi

PROGRAM = "name: once\nruntime: yaml\noutputs:\n  answer: 42\n"


def _workspace(root: Path, program: str = PROGRAM) -> Path:
    root.mkdir()
    (root / "Pulumi.yaml").write_text(program)
    return root


async def test_a_yaml_program_installs_once_per_plugins_folder_and_again_when_it_changes(
        tmp_path: Path, pulumi_env: dict[str, str], start_agent: AgentFactory) -> None:
    real = shutil.which("pulumi", path=pulumi_env["PATH"])
    assert real is not None
    env = {"PATH": f"{noting_cli(tmp_path, real, 'install', tmp_path / 'installs')}{os.pathsep}{pulumi_env['PATH']}"}

    def installs() -> int:
        path = tmp_path / "installs"
        return len(path.read_text().splitlines()) if path.exists() else 0

    first = await start_agent(_workspace(tmp_path / "first"), env=env)
    await first.stub.Install(agent_pb2.InstallRequest())
    assert installs() == 1
    assert (yamlinstall.plugins_dir(pulumi_env) / yamlinstall.NOTE).is_file()

    # another workspace of the same program, on the same PULUMI_HOME: nothing to install, and it runs
    second = await start_agent(_workspace(tmp_path / "second"), env=env)
    await second.stub.Install(agent_pb2.InstallRequest())
    assert installs() == 1, "the second workspace of the same program ran `pulumi install` again"
    assert "skipping install: the plugins of this YAML program were installed" in second.log()
    await second.stub.SelectStack(agent_pb2.SelectStackRequest(stack_name="second", create=True))
    up = await drive(second.stub.Up(agent_pb2.UpRequest()))
    assert up.error is None, up.error
    assert up.result.outputs["answer"].value == b"42"
    # the CLI reads a plugins folder holding the note as it reads its own
    listed = await asyncio.to_thread(subprocess.run, [real, "plugin", "ls", "--json"], env=pulumi_env,
                                     capture_output=True, text=True, check=False)
    assert listed.returncode == 0, listed.stderr

    # a changed program is installed
    third = await start_agent(_workspace(tmp_path / "third", PROGRAM + "  more: 1\n"), env=env)
    await third.stub.Install(agent_pb2.InstallRequest())
    assert installs() == 2

    # a plugin that was there after the install and is gone now: installed again
    plugins = yamlinstall.plugins_dir(pulumi_env)
    (plugins / "resource-gone-v1.0.0").mkdir()
    fourth = await start_agent(_workspace(tmp_path / "fourth", PROGRAM + "  other: 2\n"), env=env)
    await fourth.stub.Install(agent_pb2.InstallRequest())
    assert installs() == 3
    (plugins / "resource-gone-v1.0.0").rmdir()
    fifth = await start_agent(_workspace(tmp_path / "fifth", PROGRAM + "  other: 2\n"), env=env)
    await fifth.stub.Install(agent_pb2.InstallRequest())
    assert installs() == 4
