"""pko: `agent serve --fetch-from-stdin` — the `local` runtime's one process where `init` and `serve` were two: the
agent fetches the source (a real git server on loopback, basic auth) from a request on its stdin, then serves the
project it fetched. The request's credentials never reach the agent's environment, which the CLI and the program
inherit; a failed fetch is reported, not served. The agent says on its ready pipe (``--ready-fd``) when its fetch is
over and when it listens, and nothing once either fails."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from pathlib import Path

import grpc
import pytest
from agent_testlib import AGENT_COMMAND, drive

from pko.protocol import client, fetchrequest, ready
from pko.protocol.proto import agent_pb2
from pko.testing import gitserver, ports

pytestmark = pytest.mark.pulumi

PROJECT = "name: fetched\nruntime: yaml\noutputs:\n  where: fetched-by-the-agent\n"
PASSWORD = "hunter2-fetch-first"


def _serve(tmp_path: Path, env: dict[str, str], request: fetchrequest.FetchRequest,
           workspace: Path) -> tuple[subprocess.Popen[bytes], int, Path, ready.Lines]:
    """The agent, fetching from `request` on its stdin, and the read end of its ready pipe (``--ready-fd``)."""
    port = ports.free_port()
    log_path = tmp_path / f"agent-{port}.log"
    said, say = os.pipe2(os.O_CLOEXEC)
    argv = [*AGENT_COMMAND, "serve", "--workspace", str(workspace), "--skip-install", "--host", "127.0.0.1",
            "--port", str(port), "--fetch-from-stdin", "--ready-fd", str(say)]
    try:
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=log_file, stderr=subprocess.STDOUT,
                                       env={**env, "PYTHONUNBUFFERED": "1"}, cwd=tmp_path, pass_fds=(say,))
    finally:
        os.close(say)
    assert process.stdin is not None
    process.stdin.write(request.to_json().encode())
    process.stdin.close()
    return process, port, log_path, ready.Lines(said)


async def _said(lines: ready.Lines, timeout: float = 120) -> list[bytes]:
    """Every line the agent says on its ready pipe until it closes it (it does once it listens, or by exiting)."""
    heard = []
    async with asyncio.timeout(timeout):
        while line := await lines.next():
            heard.append(line)
    lines.close()
    return heard


def _environ(pid: int) -> str:
    return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")


async def test_the_agent_fetches_then_serves_and_keeps_the_credentials_out_of_its_environment(
        tmp_path: Path, git_server: gitserver.GitServer, pulumi_env: dict[str, str]) -> None:
    name = f"fetch-first-{uuid.uuid4().hex[:6]}"
    commit = git_server.create_repo(name, {"app/Pulumi.yaml": PROJECT})
    git_server.protect(name, "robot", PASSWORD)
    source = tmp_path / "rev" / "source"
    report = tmp_path / "rev" / "fetch.json"
    request = fetchrequest.FetchRequest(
        {"target_dir": str(source), "git_url": git_server.http_url(name), "git_revision": commit},
        {"GIT_USERNAME": "robot", "GIT_PASSWORD": PASSWORD}, "app", str(report))
    (tmp_path / "rev").mkdir()
    process, port, log_path, lines = _serve(tmp_path, pulumi_env, request, source / "app")
    try:
        # it says each step on its ready pipe as it happens, then closes its end: listening by then
        assert await _said(lines) == [ready.FETCHED, ready.LISTENING]
        assert "server listening" in log_path.read_text(errors="replace")
        assert process.poll() is None
        outcome = fetchrequest.read_report(report)
        assert outcome.error is None
        assert outcome.seconds is not None
        assert outcome.seconds > 0
        assert PASSWORD not in _environ(process.pid)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = client.stub(channel)
            await stub.SelectStack(agent_pb2.SelectStackRequest(stack_name="dev", create=True))
            up = await drive(stub.Up(agent_pb2.UpRequest()))
            assert up.error is None, up.error
            assert json.loads(up.result.outputs["where"].value) == "fetched-by-the-agent"
        assert PASSWORD not in log_path.read_text(errors="replace")
    finally:
        process.terminate()
        await asyncio.to_thread(process.wait, 60)


@pytest.mark.parametrize("case", ["wrong-password", "outside", "not-json"])
async def test_a_failed_fetch_is_reported_and_nothing_is_served(
        tmp_path: Path, git_server: gitserver.GitServer, pulumi_env: dict[str, str], case: str) -> None:
    name = f"fetch-fail-{uuid.uuid4().hex[:6]}"
    commit = git_server.create_repo(name, {"Pulumi.yaml": PROJECT})
    git_server.protect(name, "robot", PASSWORD)
    source = tmp_path / "source"
    report = tmp_path / "fetch.json"
    credentials = {"GIT_USERNAME": "robot", "GIT_PASSWORD": PASSWORD if case != "wrong-password" else "nope"}
    request = fetchrequest.FetchRequest(
        {"target_dir": str(source), "git_url": git_server.http_url(name), "git_revision": commit},
        credentials, "../elsewhere" if case == "outside" else "", str(report))
    (tmp_path / "elsewhere").mkdir()
    workspace = tmp_path / "elsewhere" if case == "outside" else source
    if case == "not-json":
        request = fetchrequest.FetchRequest({"no_such_flag": "x"}, credentials, "", str(report))
    process, _, log_path, lines = _serve(tmp_path, pulumi_env, request, workspace)
    assert await _said(lines) == []  # the stream ends with the agent: nothing fetched, never listening
    code = await asyncio.to_thread(process.wait, 120)
    assert code == 1
    error = fetchrequest.read_report(report).error
    assert error is not None
    assert {"wrong-password": "unable to fetch git source", "outside": 'the project directory "../elsewhere" is '
            "outside the source", "not-json": "invalid fetch request"}[case] in error
    assert "server listening" not in log_path.read_text(errors="replace")
    assert PASSWORD not in log_path.read_text(errors="replace")
