"""pko: the agent fork server of the `local` runtime (pko.cli.forkserver, pko.controllers.workspace.forks): a forked
agent is the agent an exec would start — it serves a real Pulumi project over gRPC, in its own session, under its own
command line, with its stdin, output, working directory and environment from the request — and its exit is told
with its code. A request it cannot set up is refused with the reason; agents go with a server that dies, and a new
server takes the next request."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from agent_testlib import drive

from pko.controllers.workspace import forks
from pko.protocol import client, ready, spawn
from pko.protocol.proto import agent_pb2
from pko.testing import ports

pytestmark = pytest.mark.pulumi

PROJECT = "name: forked\nruntime: yaml\noutputs:\n  where: forked-by-the-server\n"


@pytest.fixture
async def server(tmp_path: Path, pulumi_env: dict[str, str]) -> AsyncIterator[forks.ForkServer]:
    fork_server = forks.ForkServer(pulumi_env | {"PKO_AGENT_PARENT_PID": str(os.getpid())},
                                   tmp_path / "forkserver.log")
    yield fork_server
    await fork_server.close()


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _alive(pid: int) -> bool:
    try:
        return _stat(pid)[0] not in ("Z", "X")
    except OSError:
        return False


async def _listening(log_path: Path, child: forks.ForkedAgent, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while "server listening" not in log_path.read_text(errors="replace"):
        assert child.returncode is None, log_path.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, "the forked agent did not listen"
        await asyncio.sleep(0.05)


async def _serve(server: forks.ForkServer, tmp_path: Path, env: dict[str, str]
                 ) -> tuple[forks.ForkedAgent, int, Path]:
    workspace = tmp_path / "project"
    workspace.mkdir(exist_ok=True)
    (workspace / "Pulumi.yaml").write_text(PROJECT)
    port = ports.free_port()
    log_path = tmp_path / f"agent-{port}.log"
    argv = ["serve", "--workspace", str(workspace), "--skip-install", "--host", "127.0.0.1", "--port", str(port)]
    with log_path.open("ab") as output:
        child = await server.spawn(argv, env | {"PKO_AGENT_PARENT_PID": str(os.getpid())}, str(workspace),
                                   output.fileno())
    await _listening(log_path, child)
    return child, port, log_path


async def test_a_forked_agent_serves_a_project_and_its_exit_is_told(
        server: forks.ForkServer, tmp_path: Path, pulumi_env: dict[str, str]) -> None:
    # the request's environment, not the server's, is the agent's: it asks for JSON log lines
    child, port, log_path = await _serve(server, tmp_path, pulumi_env | {"AGENT_JSON_LOG": "true"})
    argv = Path(f"/proc/{child.pid}/cmdline").read_bytes().decode().split("\0")
    assert argv[:5] == ["python", "-m", "pko", "agent", "serve"]
    assert argv[argv.index("--port") + 1] == str(port)
    assert os.getsid(child.pid) == child.pid  # its own session, as start_new_session gives an exec'd agent
    assert int(_stat(child.pid)[1]) == server.server_pid  # the server's child: its lifeline names the server
    assert server.server_pid != os.getpid()

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = client.stub(channel)
        await stub.SelectStack(agent_pb2.SelectStackRequest(stack_name="dev", create=True))
        up = await drive(stub.Up(agent_pb2.UpRequest()))
        assert up.error is None, up.error
        assert json.loads(up.result.outputs["where"].value) == "forked-by-the-server"

    os.killpg(child.pid, signal.SIGTERM)
    assert await asyncio.wait_for(child.wait(), 60) == 0  # the agent's own graceful stop, told by the server
    assert not _alive(child.pid)
    listening = next(line for line in log_path.read_text().splitlines() if "server listening" in line)
    assert json.loads(listening)


async def test_a_forked_agent_says_it_listens_on_its_ready_pipe_as_descriptor_3(
        server: forks.ForkServer, tmp_path: Path, pulumi_env: dict[str, str]) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "Pulumi.yaml").write_text(PROJECT)
    port = ports.free_port()
    said, say = os.pipe2(os.O_CLOEXEC)
    argv = ["serve", "--workspace", str(workspace), "--skip-install", "--host", "127.0.0.1", "--port", str(port),
            "--ready-fd", str(ready.FORKED_FD)]
    try:
        with (tmp_path / "agent.log").open("ab") as output:
            child = await server.spawn(argv, pulumi_env | {"PKO_AGENT_PARENT_PID": str(os.getpid())},
                                       str(workspace), output.fileno(), ready=say)
    finally:
        os.close(say)
    lines = ready.Lines(said)
    try:
        async with asyncio.timeout(60):
            assert await lines.next() == ready.LISTENING
            # then the stream ends: the agent closed its end, and neither the server nor this process holds one
            assert await lines.next() == b""
    finally:
        lines.close()
    _, writer = await asyncio.open_connection("127.0.0.1", port)  # listening when it said so
    writer.close()
    assert child.returncode is None
    os.killpg(child.pid, signal.SIGTERM)
    assert await asyncio.wait_for(child.wait(), 60) == 0


async def test_a_request_with_too_many_descriptors_is_refused(
        server: forks.ForkServer, tmp_path: Path, pulumi_env: dict[str, str]) -> None:
    sock = await server._running()
    request = spawn.Spawn(99, ["version"], pulumi_env, str(tmp_path)).to_bytes()
    answer: asyncio.Future[forks.ForkedAgent] = asyncio.get_running_loop().create_future()
    server._pending[99] = answer
    with (tmp_path / "agent.log").open("ab") as output:
        await forks._send(sock, spawn.HEADER.pack(len(request)), [output.fileno()] * (spawn.MAX_FDS + 1))
        await asyncio.get_running_loop().sock_sendall(sock, request)
    with pytest.raises(forks.SpawnFailed, match="expected 3 or 4 file descriptors"):
        await asyncio.wait_for(answer, 60)


async def test_stdin_reaches_the_agent_and_a_failing_agent_exits_with_its_code(
        server: forks.ForkServer, tmp_path: Path, pulumi_env: dict[str, str]) -> None:
    log_path = tmp_path / "agent.log"
    with log_path.open("ab") as output:
        child = await server.spawn(["serve", "--workspace", str(tmp_path), "--fetch-from-stdin"], pulumi_env,
                                   str(tmp_path), output.fileno(), stdin=b"{not a fetch request")
    assert await asyncio.wait_for(child.wait(), 60) == 1
    assert "fetch request" in log_path.read_text()

    with log_path.open("ab") as output:
        version = await server.spawn(["version"], pulumi_env, str(tmp_path), output.fileno())
    assert await asyncio.wait_for(version.wait(), 60) == 0


async def test_a_missing_working_directory_is_refused_and_the_server_goes_on(
        server: forks.ForkServer, tmp_path: Path, pulumi_env: dict[str, str]) -> None:
    with (tmp_path / "agent.log").open("ab") as output:
        with pytest.raises(forks.SpawnFailed, match="No such file or directory"):
            await server.spawn(["version"], pulumi_env, str(tmp_path / "gone"), output.fileno())
        child = await server.spawn(["version"], pulumi_env, str(tmp_path), output.fileno())
    assert await asyncio.wait_for(child.wait(), 60) == 0


async def test_agents_go_with_a_server_that_dies_and_a_new_server_takes_over(
        server: forks.ForkServer, tmp_path: Path, pulumi_env: dict[str, str]) -> None:
    child, _, _ = await _serve(server, tmp_path, pulumi_env)
    first = server.server_pid
    os.kill(first, signal.SIGKILL)
    assert await asyncio.wait_for(child.wait(), 60) == -signal.SIGTERM  # its lifeline's signal
    assert not _alive(child.pid)

    again, _, _ = await _serve(server, tmp_path, pulumi_env)
    assert server.server_pid != first
    await server.close()  # closing the server ends what it still runs
    assert await asyncio.wait_for(again.wait(), 60) == -signal.SIGTERM
    assert not _alive(again.pid)


async def test_an_agent_whose_start_was_given_up_is_stopped(tmp_path: Path) -> None:
    """A start cancelled while the server forks (a shutdown, a worker's deadline): the agent that answers anyway has
    no one to stop it later, so it is stopped at once and its exit is still consumed."""
    fork_server = forks.ForkServer({}, tmp_path / "unused.log")
    orphan = await asyncio.create_subprocess_exec("sleep", "300", start_new_session=True)
    given_up: asyncio.Future[forks.ForkedAgent] = asyncio.get_running_loop().create_future()
    given_up.cancel()
    fork_server._pending[1] = given_up
    fork_server._heard({"id": 1, "pid": orphan.pid})
    assert await asyncio.wait_for(orphan.wait(), 10) == -signal.SIGTERM
    fork_server._heard({"exit": orphan.pid, "code": -signal.SIGTERM})
    assert not fork_server._children
