"""An operation's result comes from its own engine events where they say enough: after an `up` the agent asks the
CLI again only for the plaintext of outputs that the events carry encrypted (one `stack output --show-secrets`),
and never for the stack's history when the request named its message — and the result is the one the reference's
two listings plus history give (compared here with those listings made by the real CLI). Selecting the stack the
agent selected already runs no command; a stack removed behind its back is created again at the next selection.

The agent runs the real Pulumi CLI through a `pulumi` on its PATH that records each command line's first words
before it execs the real one, so the test sees which commands ran."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from agent_testlib import AgentFactory, drive

from pko.agent import results
from pko.protocol.proto import agent_pb2

pytestmark = pytest.mark.pulumi

PLAIN = """name: plain
runtime: yaml
outputs:
  greeting: hello
  count: 3
  ratio: 1.5
  nested:
    list: [1, "two", true, null]
    empty: {}
"""
WITH_SECRETS = """name: secrets
runtime: yaml
variables:
  hidden:
    fn::secret: shh
outputs:
  greeting: hello
  token: ${hidden}
  nested:
    inner: ${hidden}
    open: yes
"""


def _recording_pulumi(tmp_path: Path, env: dict[str, str]) -> Path:
    """A directory holding a `pulumi` that appends its first two arguments to calls.log and runs the real CLI."""
    real = shutil.which("pulumi", path=env.get("PATH"))
    assert real is not None, "the real Pulumi CLI is not on the test environment's PATH"
    bindir = tmp_path / "recording-bin"
    bindir.mkdir()
    script = bindir / "pulumi"
    script.write_text(f'#!/bin/sh\necho "$1 $2" >> {bindir / "calls.log"}\nexec {real} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bindir


def _calls(bindir: Path) -> list[str]:
    log = bindir / "calls.log"
    return [line.strip() for line in log.read_text().splitlines()] if log.exists() else []


def _cli(env: dict[str, str], workspace: Path, *args: str) -> str:
    """The real CLI's output (not through the recording wrapper)."""
    return subprocess.run([shutil.which("pulumi", path=env["PATH"]) or "pulumi", *args], cwd=workspace, env=env,
                          capture_output=True, text=True, check=True).stdout


def _listing(env: dict[str, str], workspace: Path, *flags: str) -> str:
    return _cli(env, workspace, "stack", "output", "--json", "--stack", "dev", *flags)


@pytest.mark.parametrize(("project", "output_calls"), [(PLAIN, 0), (WITH_SECRETS, 1)], ids=["plain", "secrets"])
async def test_up_result_from_its_events(tmp_path: Path, start_agent: AgentFactory, pulumi_env: dict[str, str],
                                         project: str, output_calls: int) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "Pulumi.yaml").write_text(project)
    bindir = _recording_pulumi(tmp_path, pulumi_env)
    agent = await start_agent(workspace, env={"PATH": f"{bindir}{os.pathsep}{pulumi_env['PATH']}"})
    await agent.stub.SelectStack(agent_pb2.SelectStackRequest(stack_name="dev", create=True))
    before = len(_calls(bindir))

    # what the Update controller does before each operation: select the stack (the agent selected it already)
    again = await agent.stub.SelectStack(agent_pb2.SelectStackRequest(stack_name="dev", create=True))
    assert again.summary.name == "dev"
    up = await drive(agent.stub.Up(agent_pb2.UpRequest(message="from the events")))
    assert up.error is None, up.error
    ran = _calls(bindir)[before:]
    assert ran.count("stack output") == output_calls, ran
    assert "stack history" not in ran, ran
    assert "stack select" not in ran, ran  # the agent knows which stack it selected, and asks no command for
    assert "stack --show-name" not in ran, ran  # it: the workspace is its own
    assert not [call for call in _calls(bindir) if call.startswith("stack ls")]  # never listing the backend

    summary = up.result.summary
    assert (summary.result, summary.message) == ("succeeded", "from the events")
    assert 0 <= summary.end_time.seconds - summary.start_time.seconds <= 60
    history = json.loads(_cli(pulumi_env, workspace, "stack", "history", "--json", "--stack", "dev"))
    assert history[0]["message"] == summary.message
    assert history[0]["result"] == summary.result

    # The reference's way: the masked listing says which outputs are secret, the plain one gives the values.
    expected = results.outputs(_listing(pulumi_env, workspace), _listing(pulumi_env, workspace, "--show-secrets"))
    assert dict(up.result.outputs) == expected
    assert len(expected) >= 3


async def test_a_stack_removed_behind_the_agents_back_is_created_again_at_the_next_selection(
        tmp_path: Path, start_agent: AgentFactory, pulumi_env: dict[str, str]) -> None:
    """The selection the agent trusts is forgotten when a command finds the stack gone: the operation in flight
    fails with the CLI's own words, and the next Update's selection creates the stack again."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "Pulumi.yaml").write_text(PLAIN)
    agent = await start_agent(workspace)
    select = agent_pb2.SelectStackRequest(stack_name="dev", create=True)
    await agent.stub.SelectStack(select)
    first = await drive(agent.stub.Up(agent_pb2.UpRequest(message="first")))
    assert first.error is None, first.error

    _cli(pulumi_env, workspace, "stack", "rm", "--yes", "--force", "dev")  # someone else removes it
    gone = await drive(agent.stub.Up(agent_pb2.UpRequest(message="gone")))
    assert gone.error is not None
    assert "no stack named 'dev' found" in (gone.error.details() or ""), gone.error

    await agent.stub.SelectStack(select)  # the next Update's selection: the stack is made again
    again = await drive(agent.stub.Up(agent_pb2.UpRequest(message="again")))
    assert again.error is None, again.error
    assert again.result.summary.message == "again"
    history = json.loads(_cli(pulumi_env, workspace, "stack", "history", "--json", "--stack", "dev"))
    assert [h["message"] for h in history] == ["again"]


async def test_up_without_a_message_takes_the_history(tmp_path: Path, start_agent: AgentFactory,
                                                      pulumi_env: dict[str, str]) -> None:
    """The CLI records an `up` without a message under the git commit's message: only the history knows it."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "Pulumi.yaml").write_text(PLAIN)
    bindir = _recording_pulumi(tmp_path, pulumi_env)
    agent = await start_agent(workspace, env={"PATH": f"{bindir}{os.pathsep}{pulumi_env['PATH']}"})
    await agent.stub.SelectStack(agent_pb2.SelectStackRequest(stack_name="dev", create=True))
    up = await drive(agent.stub.Up(agent_pb2.UpRequest()))
    assert up.error is None, up.error
    assert "stack history" in _calls(bindir)
    assert up.result.summary.result == "succeeded"
