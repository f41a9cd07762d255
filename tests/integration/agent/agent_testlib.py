"""Helpers for the agent integration tests: a handle on an agent process, streamed-operation outcomes, config
items, and the test programs."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2

from pko.protocol import client
from pko.protocol.proto import agent_pb2

PROGRAMS = Path(__file__).parent / "programs"
START_TIMEOUT = 120.0
AGENT_COMMAND = [sys.executable, "-m", "pko.cli.agent"]


@dataclass
class Agent:
    """A running agent process and a client connected to it."""

    process: subprocess.Popen[bytes]
    port: int
    workspace: Path
    log_path: Path
    env: dict[str, str]
    channel: grpc.aio.Channel | None = None
    metadata: Sequence[tuple[str, str]] = ()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def stub(self) -> Any:
        assert self.channel is not None
        return client.stub(self.channel)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def wait_exit(self, timeout: float = 120.0) -> int:
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"agent did not exit within {timeout}s:\n{self.log()[-4000:]}")
            await asyncio.sleep(0.1)
        return self.process.returncode

    async def close(self) -> None:
        if self.channel is not None:
            await self.channel.close()
            self.channel = None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await self.wait_exit(60)
            except AssertionError:
                self.process.kill()
                self.process.wait()


AgentFactory = Callable[..., Awaitable[Agent]]


def alive(pid: int, started: str | None = None) -> bool:
    """Process `pid` exists and is not a zombie (a zombie has exited and only waits to be reaped); with `started`
    (its start time, field 22 of /proc/<pid>/stat), only that very process: a busy machine reuses a pid within
    seconds (pid_max is 32768, and a CI run starts tens of processes a second)."""
    try:
        fields = _stat(pid)
    except OSError:
        return False
    return fields[0] != "Z" and (started is None or fields[19] == started)


def _stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (so field 3, the state, is the first)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def start_time(pid: int) -> str:
    """Process `pid`'s start time (field 22 of /proc/<pid>/stat), which tells it from a later process that reuses
    its pid (see :func:`alive`)."""
    return _stat(pid)[19]


def wait_gone(pid: int, timeout: float, started: str | None = None) -> bool:
    """Whether process `pid` (started at `started`, when given) is gone within `timeout` seconds (blocking: run it
    in a thread from a coroutine)."""
    deadline = time.monotonic() + timeout
    while alive(pid, started) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid, started)


def copy_program(name: str, destination: Path) -> Path:
    shutil.copytree(PROGRAMS / name, destination)
    return destination


@dataclass
class Outcome:
    """What a streamed operation produced: the engine events in order, then a result or an error."""

    events: list[dict[str, Any]] = field(default_factory=list)
    result: Any = None
    error: grpc.aio.AioRpcError | None = None
    order: list[str] = field(default_factory=list)

    def event_kinds(self) -> set[str]:
        return {key for event in self.events for key in event if key.endswith("Event")}


async def drive(call: Any, on_event: Callable[[dict[str, Any]], None] | None = None) -> Outcome:
    """Read a streamed operation to its end."""
    outcome = Outcome()
    try:
        async for message in call:
            if message.HasField("event"):
                event = json_format.MessageToDict(message.event)
                outcome.events.append(event)
                outcome.order.append("event")
                if on_event is not None:
                    on_event(event)
            else:
                outcome.result = message.result
                outcome.order.append("result")
    except grpc.aio.AioRpcError as err:
        outcome.error = err
    return outcome


def value(v: Any) -> struct_pb2.Value:
    s = struct_pb2.Struct()
    s.update({"v": v})
    return s.fields["v"]


def config_item(key: str, v: Any = None, *, secret: bool = False, path: bool = False, env: str | None = None,
                file: str | None = None, json: bool = False) -> agent_pb2.ConfigItem:
    item = agent_pb2.ConfigItem(key=key)
    if secret:
        item.secret = True
    if path:
        item.path = True
    if env is not None:
        item.value_from.CopyFrom(agent_pb2.ConfigValueFrom(env=env, json=json))
    elif file is not None:
        item.value_from.CopyFrom(agent_pb2.ConfigValueFrom(path=file, json=json))
    else:
        item.value.CopyFrom(value(v))
    return item


def noting_cli(root: Path, real: str, command: str, note: Path) -> Path:
    """A directory holding a `pulumi` that appends a line to `note` each time it runs `command` (its first
    argument), then runs the `real` CLI: how a test counts the CLI starts an agent makes."""
    bin_dir = root / "bin"
    bin_dir.mkdir()
    script = bin_dir / "pulumi"
    script.write_text(f'#!/bin/sh\n[ "$1" = {command} ] && echo {command} >> {note}\nexec {real} "$@"\n')
    script.chmod(0o755)
    return bin_dir
