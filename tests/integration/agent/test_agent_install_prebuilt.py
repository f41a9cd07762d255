"""PKO#1297 (fixed in the reference's 2.9.1): a project whose runtime runs a prebuilt binary
(`runtime.options.binary`) has nothing to install, and its image may carry no toolchain; the agent's Install must
succeed without running `pulumi install`, which for a Go project without `go.mod` fails."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from agent_testlib import AgentFactory

from pko.protocol.proto import agent_pb2

pytestmark = pytest.mark.pulumi


def _project(root: Path, runtime: str) -> Path:
    root.mkdir()
    (root / "Pulumi.yaml").write_text(f"name: prebuilt\nruntime:\n{runtime}")
    return root


async def test_install_is_skipped_for_a_prebuilt_binary(tmp_path: Path, start_agent: AgentFactory) -> None:
    workspace = _project(tmp_path / "prebuilt", "  name: go\n  options:\n    binary: ./bin/app\n")
    agent = await start_agent(workspace)
    await agent.stub.Install(agent_pb2.InstallRequest())
    assert "skipping install: the project runs the prebuilt binary ./bin/app" in agent.log_path.read_text()


async def test_the_same_project_without_the_binary_is_installed_and_fails(tmp_path: Path,
                                                                         start_agent: AgentFactory) -> None:
    workspace = _project(tmp_path / "source", "  name: go\n")
    agent = await start_agent(workspace)
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await agent.stub.Install(agent_pb2.InstallRequest())
    assert failed.value.code() == grpc.StatusCode.ABORTED
    assert "failed to install project dependencies" in (failed.value.details() or "")
