"""State in an S3-compatible object store (a real gofakes3 server, the real Pulumi CLI): a lock object left in the
bucket by a CLI that died on this host is released and the refused `up` runs again in the same call; a lock held on
another host is never touched, and the `up` fails naming it.

This is the recovery docs/reliability.md promises for a workspace pod killed mid-`up` whose state is in a bucket: the
restarted pod has the same hostname (the StatefulSet's pod name), so its agent can tell its own dead CLI's lock."""

from __future__ import annotations

import datetime
import json
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_testlib import Agent, AgentFactory, drive

from pko.protocol.proto import agent_pb2
from pko.testing import objectstore

pytestmark = pytest.mark.pulumi

PROGRAM = """name: bucketprog
runtime: yaml
outputs:
  greeting: hello from a bucket
"""
LOCKS = ".pulumi/locks/organization/bucketprog/dev/"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[objectstore.ObjectStore]:
    with objectstore.running(tmp_path / "s3") as server:
        yield server


def _dead_pid() -> int:
    done = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    return int(done.stdout)


def _lock(store: objectstore.ObjectStore, hostname: str, pid: int, ago: float = 0.0) -> str:
    """A lock object as the CLI leaves it, taken `ago` seconds ago."""
    key = f"{LOCKS}{uuid.uuid4()}.json"
    timestamp = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=ago)).isoformat()
    store.put(key, json.dumps({"pid": pid, "username": "pulumi", "hostname": hostname,
                               "timestamp": timestamp}).encode())
    return key


async def _agent(start_agent: AgentFactory, tmp_path: Path, store: objectstore.ObjectStore) -> Agent:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "Pulumi.yaml").write_text(PROGRAM)
    agent = await start_agent(workspace, env={"PULUMI_BACKEND_URL": store.backend_url(), **store.env()})
    await agent.stub.SelectStack(agent_pb2.SelectStackRequest(stack_name="dev", create=True))
    return agent


async def test_a_dead_local_holders_lock_in_the_bucket_is_released_and_the_up_runs(
        tmp_path: Path, start_agent: AgentFactory, store: objectstore.ObjectStore) -> None:
    agent = await _agent(start_agent, tmp_path, store)
    first = await drive(agent.stub.Up(agent_pb2.UpRequest()))
    assert first.error is None, first.error
    assert first.result.summary.result == "succeeded"
    assert ".pulumi/stacks/bucketprog/dev.json" in store.keys(".pulumi/stacks/bucketprog/")

    # the lock of the agent this one replaced (a container SIGKILLed mid-`up`): taken before this agent started
    stale = _lock(store, socket.gethostname(), _dead_pid(), ago=3600)
    second = await drive(agent.stub.Up(agent_pb2.UpRequest()))
    assert second.error is None, f"{second.error}\n{agent.log()[-3000:]}"
    assert second.result.summary.result == "succeeded"
    assert store.keys(LOCKS) == [], "the stale lock (and the up's own) are gone"
    assert f"released the stack lock {stale.rsplit('/', 1)[-1]}" in agent.log()


async def test_a_lock_held_on_another_host_is_left_alone_and_named_in_the_failure(
        tmp_path: Path, start_agent: AgentFactory, store: objectstore.ObjectStore) -> None:
    agent = await _agent(start_agent, tmp_path, store)
    held = _lock(store, "another-workspace-0", 4242)
    failed = await drive(agent.stub.Up(agent_pb2.UpRequest()))
    assert failed.result is None
    assert failed.error is not None
    assert "the stack is currently locked by 1 lock(s)" in str(failed.error.details())
    assert "@another-workspace-0 (pid 4242)" in str(failed.error.details())
    assert store.keys(LOCKS) == [held]
    assert "released the stack lock" not in agent.log()



async def test_a_twin_hosts_lock_taken_while_this_agent_runs_is_left_alone(
        tmp_path: Path, start_agent: AgentFactory, store: objectstore.ObjectStore) -> None:
    """A pod's hostname is its name, unique in its namespace only: the same Stack in another cluster against the
    same bucket runs on a twin hostname, and its live CLI's pid means nothing here. A lock of this hostname taken
    while this agent ran, by no command of its own, is that twin's: left alone, and the update fails on it."""
    agent = await _agent(start_agent, tmp_path, store)
    # taken a minute after this agent started (beyond the slack allowed for two nodes' clocks)
    held = _lock(store, socket.gethostname(), _dead_pid(), ago=-60)
    failed = await drive(agent.stub.Up(agent_pb2.UpRequest()))
    assert failed.error is not None
    assert "the stack is currently locked by 1 lock(s)" in str(failed.error.details())
    assert store.keys(LOCKS) == [held]
    assert "released the stack lock" not in agent.log()
