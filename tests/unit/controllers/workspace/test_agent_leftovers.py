"""What a dead agent of the `local` runtime left running (its CLI's language host waiting for a gone engine) is
found by the agent's `$PKO_AGENT_INSTANCE` and killed; other agents' processes are not touched."""

from __future__ import annotations

import os
import subprocess
import sys

from pko.controllers.workspace import local

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_only_the_dead_agents_processes_are_killed() -> None:
    mine = subprocess.Popen(SLEEP, env={**os.environ, local.INSTANCE_ENV: "dead-agent"})
    other = subprocess.Popen(SLEEP, env={**os.environ, local.INSTANCE_ENV: "live-agent"})
    try:
        assert local.kill_leftovers("dead-agent") == [mine.pid]
        assert mine.wait(10) == -9
        assert other.poll() is None
        assert local.kill_leftovers("") == []
    finally:
        for process in (mine, other):
            process.kill()
            process.wait()
