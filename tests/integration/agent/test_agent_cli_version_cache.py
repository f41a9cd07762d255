"""The CLI's version, asked once per binary when the runtime names a cache file (pko.agent.cliversion): the local
runtime starts an agent per workspace, all running one binary, and each used to pay a `pulumi version` start."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from agent_testlib import AgentFactory, noting_cli

from pko.agent import cliversion
from pko.protocol.proto import agent_pb2

pytestmark = pytest.mark.pulumi


async def test_agents_sharing_a_cache_ask_a_binary_once_and_again_when_it_changes(
        tmp_path: Path, pulumi_env: dict[str, str], start_agent: AgentFactory) -> None:
    real = shutil.which("pulumi", path=pulumi_env["PATH"])
    assert real is not None
    bin_dir = noting_cli(tmp_path, real, "version", tmp_path / "asked")
    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "Pulumi.yaml").write_text("name: versions\nruntime: yaml\n")
    cache = tmp_path / "cache" / "versions.json"
    env = {"PATH": f"{bin_dir}{os.pathsep}{pulumi_env['PATH']}", cliversion.ENV: str(cache)}

    def asked() -> int:
        path = tmp_path / "asked"
        return len(path.read_text().splitlines()) if path.exists() else 0

    versions = []
    for _ in range(2):
        agent = await start_agent(workspace, env=env)
        versions.append((await agent.stub.PulumiVersion(agent_pb2.PulumiVersionRequest())).version)
    assert asked() == 1, "the second agent asked the CLI again"
    assert versions[0] == versions[1], versions
    assert versions[0].startswith("3."), versions

    script = bin_dir / "pulumi"
    os.utime(script, ns=(script.stat().st_atime_ns, script.stat().st_mtime_ns + 1_000_000_000))  # rebuilt
    agent = await start_agent(workspace, env=env)
    assert (await agent.stub.PulumiVersion(agent_pb2.PulumiVersionRequest())).version == versions[0]
    assert asked() == 2, "a changed binary was not asked"

    cache.write_text("{not json")  # a corrupt file means the CLI is asked, never a failed start
    agent = await start_agent(workspace, env=env)
    assert (await agent.stub.PulumiVersion(agent_pb2.PulumiVersionRequest())).version == versions[0]
    assert asked() == 3

    agent = await start_agent(workspace, env={"PATH": env["PATH"]})  # no cache named: asked every time
    assert (await agent.stub.PulumiVersion(agent_pb2.PulumiVersionRequest())).version == versions[0]
    assert asked() == 4
