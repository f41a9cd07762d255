"""The workspace agent killed in the middle of an `up` (the `local` runtime: the agent is a child of the operator,
the Pulumi CLI a child of the agent).

- SIGKILL: the CLI dies without cleaning up (SIGPIPE: its stdout was the dead agent's pipe) and its lock file stays
  in the backend; its language host would wait forever for the gone engine, so the operator kills what the dead
  agent left (found by its $PKO_AGENT_INSTANCE); the Update ends Failed and the Stack retries per its policy: the
  next agent sees that the lock's holder (a pid on this host) is no longer a running Pulumi CLI and releases it
  before its `up` (pko.agent.stalelocks — what `pulumi cancel` would do), so the retry succeeds. Without that the
  Stack would fail with `Another update is currently in progress` until someone ran `pulumi cancel`.
- SIGTERM (a pod being deleted, a node draining): the agent cancels the CLI within its grace period; the CLI
  releases its lock before the agent exits.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import gitserver
from pko.testing.waiting import condition, eventually, wait_for

from . import chaos

# Held until the test creates the file named by the `release` config value (or for ten minutes): the first `up`
# is surely in the middle when its agent is killed, and the retry, run once the test has looked, does not wait.
SLOW_PROGRAM = """import os
import time

import pulumi

release = pulumi.Config().require("release")
deadline = time.monotonic() + 600
while not os.path.exists(release) and time.monotonic() < deadline:
    time.sleep(0.1)
pulumi.export("done", pulumi.get_stack())
"""


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = chaos._parent(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _agent_and_cli(operator_pid: int, workspace: str) -> tuple[int, int] | None:
    """The agent serving `workspace` and its running `pulumi up`, if both are there."""
    for pid in _descendants(operator_pid):
        argv = _cmdline(pid)
        if "serve" in argv and "--kube-workspace-name" in argv and workspace in argv:
            for child in _descendants(pid):
                cli = _cmdline(child)
                if cli and Path(cli[0]).name == "pulumi" and "up" in cli:
                    return pid, child
    return None


def _locks_of(backend: Path, pid: int) -> list[Path]:
    found = []
    for path in (backend / ".pulumi" / "locks").rglob("*.json"):
        try:
            if json.loads(path.read_text()).get("pid") == pid:
                found.append(path)
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
async def test_agent_killed_mid_update(ckc: kclient.Client, cns: str, tmp_path: Path, git: gitserver.GitServer,
                                       operators: Callable[..., chaos.OperatorProcess], signum: int) -> None:
    run: str = operators.run  # type: ignore[attr-defined]
    op = operators()
    op.start()
    await op.ready()
    repo = f"slow-{cns}"
    commit = git.create_repo(repo, {"Pulumi.yaml": "name: slow\nruntime: python\n", "__main__.py": SLOW_PROGRAM})
    backend, release = tmp_path / "state", tmp_path / "release"
    backend.mkdir()
    await ckc.create(resources.STACK.new("slow", cns, spec={
        "stack": "dev", "projectRepo": git.http_url(repo), "commit": commit, "backend": f"file://{backend}",
        "config": {"release": str(release)},
        "envRefs": {"PULUMI_CONFIG_PASSPHRASE": chaos.PASSPHRASE},
        "retryPolicy": {"backoffBaseSeconds": 1, "backoffFactor": 1, "maxFailures": 3},
    }))
    found: list[tuple[int, int]] = []

    def running() -> bool:
        pair = _agent_and_cli(op.pid, "slow")
        if pair is not None and _locks_of(backend, pair[1]):
            found.append(pair)
            return True
        return False

    await eventually(running, "the agent running `pulumi up` with the stack locked", 240, interval=0.1)
    agent, cli = found[-1]
    stack = await ckc.get(resources.STACK, "slow", cns)
    first = stack["status"]["currentUpdate"]["name"]
    os.kill(agent, signum)

    # The CLI winds down (Ctrl-C: it cancels, saves its state and releases its lock), then no process of the
    # killed agent is left.
    await eventually(lambda: chaos._state(cli) in ("Z", "gone"), "the agent's `pulumi up` to exit", 60, interval=0.1)
    stale = _locks_of(backend, cli)
    if signum == signal.SIGTERM:
        assert stale == [], "the CLI of a SIGTERMed agent left its lock"
    print(f"locks the killed agent's CLI left: {[p.name for p in stale]}")
    # The CLI of a SIGKILLed agent dies of SIGPIPE (its stdout was the agent's pipe) without cancelling; its
    # language host would wait forever for the gone engine: the operator kills what the dead agent left.
    left = await chaos.wait_no_orphans(run, [op.pid], timeout=30)
    assert left == [], f"processes outlived their agent:\n{chaos.describe(left)}"
    release.touch()  # the retry's program runs through

    failed = await wait_for(ckc, resources.UPDATE, first, cns,
                            lambda u: condition(u, "Complete").get("status") == "True", timeout=120,
                            diagnostics=op.tail)
    assert condition(failed, "Failed").get("status") == "True", failed.get("status")
    message = condition(failed, "Failed").get("message") or failed["status"].get("message") or ""
    print(f"the interrupted Update's message: {message!r}")
    assert message, "the failed Update says nothing about why"

    done = await wait_for(ckc, resources.STACK, "slow", cns, lambda o: (
        condition(o, "Ready").get("status") == "True" and (o.get("status") or {}).get("outputs") == {"done": "dev"}),
        timeout=300, diagnostics=op.tail)
    assert done["status"]["lastUpdate"]["name"] != first, "the Stack did not retry with a new Update"
    assert list((backend / ".pulumi" / "locks").rglob("*.json")) == []
    released = "".join(p.read_text(errors="replace") for p in (tmp_path / "workspaces").rglob("agent.log"))
    for path in stale:
        assert f"released the stack lock {path.name}" in released, "the retry did not release the dead CLI's lock"
    assert await op.terminate() == 0, op.tail()
