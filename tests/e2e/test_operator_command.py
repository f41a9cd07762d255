"""`pko operator` as users run it: a process with flags, probes, metrics and the Program file server, that
drives a Stack to Ready and stops cleanly on SIGTERM, leaving no agent process behind."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import controlplane, ports
from pko.testing.waiting import condition, wait_for

PASSPHRASE = {"type": "Literal", "literal": {"value": "operator-command"}}


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except OSError as err:
        return getattr(err, "code", 0) or 0, str(err)


async def _eventually_ok(url: str, process: subprocess.Popen[bytes], timeout: float = 60.0,
                         log: Path | None = None) -> str:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log is not None else "(its output was not kept)"
            raise AssertionError(f"pko operator exited early with {process.returncode}:\n{tail}")
        code, body = await asyncio.to_thread(_get, url)
        if code == 200:
            return body
        await asyncio.sleep(0.5)
    raise AssertionError(f"{url} not OK after {timeout:.0f}s")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


async def test_operator_process_runs_a_stack_and_stops_cleanly(
    cluster: controlplane.ControlPlane, kc: kclient.Client, namespace: str, tmp_path: Path,
    pulumi_env: dict[str, str],
) -> None:
    health, metrics, files = ports.free_port(), ports.free_port(), ports.free_port()
    log = (tmp_path / "operator.log").open("wb")
    process = subprocess.Popen(  # noqa: ASYNC220 (spawning does not block; waits go through to_thread)
        [sys.executable, "-m", "pko", "operator", "--kubeconfig", str(cluster.kubeconfig),
         "--workspace-runtime", "local", "--workspace-root", str(tmp_path / "workspaces"),
         "--health-probe-bind-address", f"127.0.0.1:{health}", "--metrics-bind-address", f"127.0.0.1:{metrics}",
         "--program-fs-addr", f"127.0.0.1:{files}", "--zap-log-level", "info"],
        env=dict(pulumi_env), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )
    try:
        await _eventually_ok(f"http://127.0.0.1:{health}/healthz", process, log=tmp_path / "operator.log")
        await _eventually_ok(f"http://127.0.0.1:{health}/readyz", process, log=tmp_path / "operator.log")
        backend = tmp_path / "state"
        backend.mkdir()
        await kc.create(resources.PROGRAM.new("cmd", namespace, program={"outputs": {"answer": 42}}))
        await kc.create(resources.STACK.new("cmd", namespace, spec={
            "stack": "dev", "programRef": {"name": "cmd"}, "backend": f"file://{backend}",
            "envRefs": {"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE},
        }))
        stack = await wait_for(kc, resources.STACK, "cmd", namespace,
                               lambda o: condition(o, "Ready").get("status") == "True")
        assert stack["status"]["outputs"] == {"answer": 42}
        program = await kc.get(resources.PROGRAM, "cmd", namespace)
        assert program["status"]["artifact"]["url"].startswith(f"http://127.0.0.1:{files}/programs/{namespace}/")
        text = await _eventually_ok(f"http://127.0.0.1:{metrics}/metrics", process)
        assert "stacks_active" in text
        assert f'stacks_failing{{name="cmd",namespace="{namespace}"}} 0.0' in text
        assert "controller_runtime_reconcile_total" in text
        agents = _children(process.pid)
        assert agents, "the local runtime runs the workspace agent as a child of the operator"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.to_thread(process.wait, 90)
        finally:
            if process.poll() is None:
                process.kill()
            log.close()
    assert code == 0, (tmp_path / "operator.log").read_text()[-3000:]
    for pid in agents:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in _state(pid), f"agent {pid} outlived the operator"
    logs = (tmp_path / "operator.log").read_text()
    assert "operator-command" not in logs  # the passphrase never reaches the logs
    assert "pko operator stopped" in logs
    assert "event loop: uvloop" in logs  # the loop pko's image runs the operator on (pko.runtime.eventloop)
    frozen = re.search(r"(\d+) objects of the start frozen", logs)  # out of the cycle collector's sight (heap.py)
    assert frozen is not None
    assert int(frozen.group(1)) > 10_000


def _state(pid: int) -> str:
    try:
        return "zombie" if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z" else "alive"
    except OSError:
        return "gone"


def test_operator_help_lists_its_flags() -> None:
    result = subprocess.run([sys.executable, "-m", "pko", "operator", "--help"], capture_output=True, text=True,
                            timeout=60, env=dict(os.environ), check=False)
    assert result.returncode == 0
    for flag in ("--workspace-runtime", "--program-fs-addr", "--leader-elect", "--max-concurrent-updates"):
        assert flag in result.stdout


def test_an_event_loop_it_cannot_run_is_refused_at_start(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "pko", "operator", "--kubeconfig", str(tmp_path / "none")],
                            capture_output=True, text=True, timeout=60, env=dict(os.environ, PKO_EVENT_LOOP="trio"),
                            check=False)
    assert result.returncode == 2
    assert "PKO_EVENT_LOOP must be 'uvloop' or 'asyncio', not 'trio'" in result.stderr


async def test_agents_do_not_outlive_a_killed_operator(
    cluster: controlplane.ControlPlane, kc: kclient.Client, namespace: str, tmp_path: Path,
    pulumi_env: dict[str, str],
) -> None:
    health = ports.free_port()
    process = subprocess.Popen(  # noqa: ASYNC220 (spawning does not block)
        [sys.executable, "-m", "pko", "operator", "--kubeconfig", str(cluster.kubeconfig),
         "--workspace-runtime", "local", "--workspace-root", str(tmp_path / "workspaces"),
         "--health-probe-bind-address", f"127.0.0.1:{health}", "--program-fs-addr", f"127.0.0.1:{ports.free_port()}"],
        env=dict(pulumi_env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )
    try:
        await _eventually_ok(f"http://127.0.0.1:{health}/readyz", process)
        await kc.create(resources.WORKSPACE.new("killed", namespace, spec={
            "projectInfo": {"name": "killed", "runtime": "yaml"}, "stacks": [{"name": "dev", "create": True}]}))
        await wait_for(kc, resources.WORKSPACE, "killed", namespace,
                       lambda o: condition(o, "Ready").get("status") == "True")
        agents = _children(process.pid)
        assert agents
    finally:
        process.kill()
        await asyncio.to_thread(process.wait, 30)
    for _ in range(300):  # up to a minute for SIGTERM to land and the agents to stop gracefully
        alive = [pid for pid in agents if _state(pid) == "alive"]
        if not alive:
            break
        await asyncio.sleep(0.2)
    assert alive == [], "agents outlived their SIGKILLed operator"
