"""Fixtures for the agent's integration tests: a real `pko agent serve` process on loopback (client on our
generated stub) and a real git server (HTTP with basic auth, git://, SSH with a generated key).

The agent always runs as a separate process started through its command line, with the real Pulumi CLI and a
file backend (`pulumi_env`), exactly as the operator starts it.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import grpc
import pytest
from agent_testlib import AGENT_COMMAND, START_TIMEOUT, Agent, AgentFactory

from pko.controllers.workspace import local
from pko.testing import gitserver, ports


def spawn(argv: Sequence[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log_file:
        return subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)


@pytest.fixture
async def start_agent(tmp_path: Path, pulumi_env: dict[str, str]) -> AsyncIterator[AgentFactory]:
    """Start `pko agent serve` on a workspace directory; every agent started is stopped at the end."""
    agents: list[Agent] = []

    async def start(workspace: Path, *extra: str, command: Sequence[str] = AGENT_COMMAND,
                    env: dict[str, str] | None = None, skip_install: bool = True,
                    metadata: Sequence[tuple[str, str]] = ()) -> Agent:
        port = ports.free_port()
        log_path = tmp_path / f"agent-{port}.log"
        # the instance mark the local runtime gives its agents: everything the agent starts inherits it, so what
        # an agent that exits at once leaves behind (its CLI's plugins) is found and stopped at the end
        process_env = {**pulumi_env, "PYTHONUNBUFFERED": "1", local.INSTANCE_ENV: f"agent-test-{port}", **(env or {})}
        argv = [*command, "serve", "--workspace", str(workspace), "--host", "127.0.0.1", "--port", str(port),
                *(["--skip-install"] if skip_install else []), *extra]
        process = spawn(argv, log_path, process_env)
        agent = Agent(process, port, workspace, log_path, process_env, metadata=metadata)
        agents.append(agent)
        deadline = time.monotonic() + START_TIMEOUT
        while "server listening" not in agent.log():
            if process.poll() is not None:
                pytest.fail(f"the agent exited with {process.returncode}:\n{agent.log()[-4000:]}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail(f"the agent did not start listening:\n{agent.log()[-4000:]}", pytrace=False)
            await asyncio.sleep(0.1)
        agent.channel = grpc.aio.insecure_channel(agent.address)
        return agent

    yield start
    for agent in agents:
        await agent.close()
        await asyncio.to_thread(local.kill_leftovers, agent.env.get(local.INSTANCE_ENV, ""))


@pytest.fixture(scope="session")
def git_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[gitserver.GitServer]:
    """A git server on loopback (HTTP with optional basic auth, git://, SSH with a generated key)."""
    with gitserver.running(tmp_path_factory.mktemp("gitserver"), ssh=True) as server:
        yield server
