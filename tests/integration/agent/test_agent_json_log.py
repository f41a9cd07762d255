"""`AGENT_JSON_LOG=true` (the reference's switch, PKO#952 / its PR#1306): every line the agent writes while it
installs, selects a stack, runs a real `up` that prints, and fails one is a JSON object a log pipeline can read,
with the level, the logger, the message and a timestamp; without the switch the lines stay plain text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_testlib import AgentFactory, drive

from pko.protocol.proto import agent_pb2

pytestmark = pytest.mark.pulumi


def _project(tmp_path: Path, greeting: str) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    (workspace / "Pulumi.yaml").write_text(f"name: json-log\nruntime: yaml\noutputs:\n  greeting: {greeting}\n")
    return workspace


@pytest.mark.parametrize("switch", ["true", "TRUE", "1"])
async def test_every_line_of_a_real_update_is_json(tmp_path: Path, start_agent: AgentFactory, switch: str) -> None:
    workspace = _project(tmp_path, "hello")
    agent = await start_agent(workspace, env={"AGENT_JSON_LOG": switch}, skip_install=False)
    await agent.stub.SelectStack(agent_pb2.SelectStackRequest(stack_name="dev", create=True))
    up = await drive(agent.stub.Up(agent_pb2.UpRequest(message="json lines")))
    assert up.error is None, up.error
    _project(tmp_path, "${undefined}")  # a program that fails: the failure's lines are JSON too
    failed = await drive(agent.stub.Up(agent_pb2.UpRequest(message="fails")))
    assert failed.error is not None or failed.result.summary.result == "failed", failed

    lines = [line for line in agent.log().splitlines() if line.strip()]
    assert len(lines) >= 5, lines
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"not a JSON line: {line!r}")
    assert all(isinstance(r, dict) and {"level", "logger", "event", "timestamp"} <= r.keys() for r in records)
    messages = [r["event"] for r in records]
    assert any("server listening" in m for m in messages), messages
    assert any("up completed" in m for m in messages), messages
    assert {r["level"] for r in records} >= {"info"}


async def test_without_the_switch_lines_are_text(tmp_path: Path, start_agent: AgentFactory) -> None:
    agent = await start_agent(_project(tmp_path, "hello"), env={"AGENT_JSON_LOG": "false"})
    first = agent.log().splitlines()[0]
    with pytest.raises(json.JSONDecodeError):
        json.loads(first)
