"""The self-contained agent executable (one file, built by tools/agent-bin/build.sh) does what the
workspace pod asks of it with no Python beside it: init from git, serve (also in kube auth mode), Up, and a clean
exit on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import uuid
from pathlib import Path

import grpc
import pytest
from agent_testlib import AgentFactory, config_item, drive

import pko
from pko.protocol.proto import agent_pb2
from pko.testing import binaries, gitserver
from pko.testing.controlplane import ControlPlane

pytestmark = pytest.mark.pulumi

ROOT = Path(__file__).resolve().parents[3]
BUILD_TIMEOUT = 1200

PROGRAM = """name: standalone
runtime: yaml
config:
  greeting:
    type: string
outputs:
  message: ${greeting}, from the standalone agent
  hidden:
    fn::secret: ${greeting}
"""


@pytest.fixture(scope="module")
def agent_binary() -> Path:
    """The executable for the current sources (build.sh reuses a cached build when nothing changed)."""
    build = subprocess.run(["bash", str(ROOT / "tools" / "agent-bin" / "build.sh")], capture_output=True, text=True,
                           check=False, timeout=BUILD_TIMEOUT)
    if build.returncode != 0:
        pytest.fail(f"building the agent executable failed:\n{build.stderr[-4000:]}", pytrace=False)
    path = Path(build.stdout.strip().splitlines()[-1])
    assert path.is_file(), path
    assert os.access(path, os.X_OK), path
    return path


@pytest.fixture
def bare_env(pulumi_env: dict[str, str]) -> dict[str, str]:
    """The Pulumi environment without our venv: only the built binaries and the system's basic tools."""
    env = {k: v for k, v in pulumi_env.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join([str(binaries.bin_dir()), "/usr/bin", "/bin"])
    return env


def test_executable_unpacks_once_beside_itself(tmp_path: Path, agent_binary: Path, bare_env: dict[str, str]) -> None:
    """As in a pod: `cp /agent /share/`, then concurrent first runs share one tree, later runs reuse it."""
    share = tmp_path / "share"
    share.mkdir()
    agent = share / "agent"
    shutil.copy2(agent_binary, agent)

    def version() -> subprocess.Popen[str]:
        return subprocess.Popen([str(agent), "version"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=bare_env)

    first = [version() for _ in range(4)]
    for process in first:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        assert out.strip() == pko.__version__
    entries = sorted(p.name for p in share.iterdir())
    assert len(entries) == 2, entries  # the executable and one complete tree, no temporary leftovers
    tree = share / entries[0]
    assert tree.name.startswith(".pko-agent-")
    assert oct(tree.stat().st_mode & 0o777) == oct(0o755)
    unpacked = tree.stat().st_ino, (tree / "pko-agent").stat().st_mtime_ns

    again = version()
    assert again.communicate(timeout=120)[0].strip() == pko.__version__
    assert (tree.stat().st_ino, (tree / "pko-agent").stat().st_mtime_ns) == unpacked


async def test_init_serve_up_with_the_executable(tmp_path: Path, agent_binary: Path, bare_env: dict[str, str],
                                                 git_server: gitserver.GitServer,
                                                 start_agent: AgentFactory) -> None:
    name = f"standalone-{uuid.uuid4().hex[:6]}"
    commit = git_server.create_repo(name, {"deploy/Pulumi.yaml": PROGRAM, "README.md": "hi\n"})
    share = tmp_path / "share"

    def init() -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(agent_binary), "init", "-t", str(share / "source"), "--git-url",
                               git_server.http_url(name), "--git-revision", commit],
                              capture_output=True, text=True, env={**bare_env, "GIT_SHALLOW": "true"},
                              check=False, timeout=300)

    fetched = await asyncio.to_thread(init)
    assert fetched.returncode == 0, fetched.stderr
    (share / "workspace").symlink_to(share / "source" / "deploy")  # what the pod's fetch script does

    agent = await start_agent(share / "workspace", "--env-file", str(share / ".env"), command=[str(agent_binary), "--"],
                              env=bare_env)
    stub = agent.stub
    assert (await stub.PulumiVersion(agent_pb2.PulumiVersionRequest())).version == "3.259.0"
    await stub.SelectStack(agent_pb2.SelectStackRequest(stack_name="dev", create=True))
    await stub.SetAllConfig(agent_pb2.SetAllConfigRequest(config=[config_item("greeting", "hello")]))

    up = await drive(stub.Up(agent_pb2.UpRequest()))
    assert up.error is None, f"{up.error}\n{agent.log()[-3000:]}"
    assert up.order[-1] == "result"
    assert up.events
    outputs = {k: (json.loads(v.value), v.secret) for k, v in up.result.outputs.items()}
    assert outputs == {"message": ("hello, from the standalone agent", False), "hidden": ("hello", True)}

    destroy = await drive(stub.Destroy(agent_pb2.DestroyRequest()))
    assert destroy.error is None, destroy.error

    agent.process.send_signal(signal.SIGTERM)
    assert await agent.wait_exit(60) == 0, agent.log()[-3000:]
    assert "server stopped" in agent.log()


async def test_executable_kube_auth_mode(tmp_path: Path, agent_binary: Path, bare_env: dict[str, str],
                                         start_agent: AgentFactory, control_plane: ControlPlane) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "Pulumi.yaml").write_text(PROGRAM)
    agent = await start_agent(workspace, "--auth-mode", "kube", "--kube-audience", "ws.default",
                              "--kube-workspace-namespace", "default", "--kube-workspace-name", "ws",
                              "--kubeconfig", str(control_plane.kubeconfig), command=[str(agent_binary)],
                              env=bare_env)
    with pytest.raises(grpc.aio.AioRpcError) as anonymous:
        await agent.stub.PulumiVersion(agent_pb2.PulumiVersionRequest())
    assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.aio.AioRpcError) as bogus:
        await agent.stub.PulumiVersion(agent_pb2.PulumiVersionRequest(), metadata=(("authorization", "Bearer x"),))
    assert bogus.value.code() == grpc.StatusCode.UNAUTHENTICATED  # a real TokenReview said no
    assert "authentication failed" in agent.log()
