"""An agent of the `local` runtime never outlives the operator that started it, whatever becomes of the death signal.

The kernel's parent-death SIGTERM is the first line (see test_agent_cancellation); these tests take it away, as a
parent can without knowing: a SIGTERM it blocked or ignored is blocked or ignored in the agent it execs. Found by
the chaos tier: an agent started a moment before its operator's SIGKILL logged that it was listening and lived on
under init. The watch that stands behind the signal is a pidfd, or a poll of the parent pid where there is none
(the last test).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_testlib import AGENT_COMMAND, AgentFactory, alive, copy_program, start_time, wait_gone

from pko.agent import lifeline
from pko.testing import ports

pytestmark = pytest.mark.pulumi

#: The "operator": starts the agent with its lifeline and SIGTERM blocked or ignored (`mode`), then exits when
#: told to (a release file) or after `delay` seconds.
WRAPPER = """import os, signal, subprocess, sys, time
pidfile, release, mode, delay, argv = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5:]
def lose_the_death_signal():
    if mode == "blocked":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    else:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
agent = subprocess.Popen(argv, env={**os.environ, "PKO_AGENT_PARENT_PID": str(os.getpid())},
                         preexec_fn=lose_the_death_signal)
open(pidfile + ".tmp", "w").write(str(agent.pid)); os.rename(pidfile + ".tmp", pidfile)
deadline = time.monotonic() + delay
while not os.path.exists(release) and time.monotonic() < deadline:
    time.sleep(0.01)
os._exit(0)
"""


def _wrapper(tmp_path: Path, name: str, mode: str, delay: float) -> tuple[list[str], Path, Path]:
    wrapper, pidfile, release = tmp_path / "parent_of_agent.py", tmp_path / f"{name}.pid", tmp_path / f"{name}.die"
    if not wrapper.exists():  # written once: a wrapper starting while it is rewritten could read it empty
        wrapper.write_text(WRAPPER)
    return [sys.executable, str(wrapper), str(pidfile), str(release), mode, str(delay)], pidfile, release


async def test_an_agent_whose_death_signal_is_blocked_still_exits_with_its_operator(
        tmp_path: Path, start_agent: AgentFactory) -> None:
    command, pidfile, release = _wrapper(tmp_path, "blocked", "blocked", 3600)
    agent = await start_agent(copy_program("slow-python", tmp_path / "ws"), command=[*command, *AGENT_COMMAND])
    agent_pid = int(pidfile.read_text())
    started = start_time(agent_pid)
    release.touch()  # the operator dies; its death signal stays pending in the agent, blocked
    assert await agent.wait_exit(10) == 0
    try:
        assert await asyncio.to_thread(wait_gone, agent_pid, 30.0, started), agent.log()[-3000:]
    finally:
        if alive(agent_pid, started):  # a failure here must not leave it running: it would never go by itself
            os.kill(agent_pid, signal.SIGKILL)
    log = agent.log()
    assert "has exited, and no death signal has come" in log, log[-3000:]
    assert "server stopped" in log, log[-3000:]


def test_an_operator_that_dies_while_its_agent_starts_leaves_no_agent_behind(
        tmp_path: Path, pulumi_env: dict[str, str]) -> None:
    """The operator dies at some moment of the agent's start-up — before it asks for its death signal, before its
    SIGTERM handler is installed, after it listens — with SIGTERM ignored by inheritance (an ignored signal stays
    ignored through exec, so a death signal before the handler was dropped). Every agent goes."""
    agents: list[tuple[subprocess.Popen[bytes], Path, Path]] = []
    for n, delay in enumerate((0.0, 0.15, 0.3, 0.5, 0.8, 1.2, 2.0)):
        command, pidfile, _ = _wrapper(tmp_path, f"agent-{n}", "ignored", delay)
        workspace = copy_program("slow-python", tmp_path / f"ws-{n}")
        log_path = tmp_path / f"agent-{n}.log"
        argv = [*command, *AGENT_COMMAND, "serve", "--workspace", str(workspace), "--host", "127.0.0.1",
                "--port", str(ports.free_port()), "--skip-install"]
        with log_path.open("wb") as log_file:
            wrapper = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env={**pulumi_env, "PYTHONUNBUFFERED": "1"})
        agents.append((wrapper, pidfile, log_path))
    left: list[str] = []
    for wrapper, pidfile, log_path in agents:
        assert wrapper.wait(30) == 0
        deadline = time.monotonic() + 10
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        agent_pid = int(pidfile.read_text())
        if not wait_gone(agent_pid, 30.0):
            left.append(f"{agent_pid}:\n{log_path.read_text()[-2000:]}")
            os.kill(agent_pid, signal.SIGKILL)
    assert not left, "agents outlived their operator:\n" + "\n".join(left)


#: A process that watches its parent without a pidfd (as on kernels before 5.3): `os.pidfd_open` is taken away
#: before :func:`lifeline.watch` looks for it, so only the poll of the parent pid can tell it its parent is gone.
POLLING_CHILD = """import asyncio, os, sys
del os.pidfd_open
from pko.agent import lifeline
told = sys.argv[1]
async def main():
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    assert lifeline._open_pidfd(os.getppid()) is None
    stop = lifeline.watch(loop, lambda pid: done.set_result(pid))
    open(told + ".watching", "w").close()
    pid = await asyncio.wait_for(done, 30)
    stop()
    open(told + ".tmp", "w").write(str(pid))
    os.rename(told + ".tmp", told)
asyncio.run(main())
"""
POLLING_PARENT = """import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]],
                 env={**os.environ, "PKO_AGENT_PARENT_PID": str(os.getpid())})
while not os.path.exists(sys.argv[2] + ".watching"):
    time.sleep(0.01)
print(os.getpid(), flush=True)
os._exit(0)
"""


def test_without_a_pidfd_the_watch_polls_and_tells_of_the_parents_exit(tmp_path: Path) -> None:
    told = tmp_path / "told"
    parent = subprocess.run([sys.executable, "-c", POLLING_PARENT, POLLING_CHILD, str(told)], capture_output=True,
                            text=True, timeout=60, check=True)
    parent_pid = int(parent.stdout)
    deadline = time.monotonic() + 4 * lifeline.POLL_SECONDS + 5
    while not told.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert told.exists(), "the watch never told of its parent's exit"
    assert told.read_text() == str(parent_pid)
