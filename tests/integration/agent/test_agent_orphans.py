"""The agent adopts what its Pulumi CLI orphans and stops it (pko.agent.orphans), with real processes.

Each case runs in a child Python process of its own, which makes itself a child subreaper as the agent does (the
test process must not: every orphan of the session would become its child). There a stand-in "CLI" starts a
long-lived "language host" in a process group of its own and exits without stopping it — what a Pulumi CLI
cancelled mid-`up` was seen to do — and the case reports what happened to the host."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

# Starts a host (in its own session, as the CLI starts plugins) that itself starts a child, prints both pids, exits.
CLI = """
import subprocess, sys
host = subprocess.Popen([sys.executable, "-c", '''
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(child.pid, flush=True)
time.sleep(120)
'''], start_new_session=True, stdout=subprocess.PIPE, text=True)
print(host.pid, host.stdout.readline().strip(), flush=True)
"""

CASE = """
import asyncio, json, os, subprocess, sys, time
from pko.agent import orphans

adopted = orphans.adopt()
cli = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True)
host, grandchild = map(int, cli.stdout.readline().split())
cli.wait()
deadline = time.monotonic() + 10
while host not in orphans.children() and time.monotonic() < deadline:
    time.sleep(0.02)
ours = host in orphans.children()
keep = subprocess.Popen([sys.argv[2], "60"])  # a process named like the CLI: a command being started
if sys.argv[3] == "sweep":
    stopped = orphans.sweep(set(), "pulumi")
    time.sleep(0.3)  # the host's child is re-parented to us once the host is gone
    stopped += orphans.sweep(set(), "pulumi")
else:
    keep.kill(); keep.wait()
    stopped = asyncio.run(orphans.stop_all())
alive = lambda pid: os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] != "Z"
kept = keep.poll() is None
keep.kill(); keep.wait()
print(json.dumps({"adopted": adopted, "ours": ours, "stopped": stopped, "host": alive(host),
                  "grandchild": alive(grandchild), "kept": kept, "left": orphans.children()}))
"""


def _case(mode: str, tmp_path: Path) -> dict[str, object]:
    fake_cli = tmp_path / "pulumi"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", fake_cli)
    done = subprocess.run([sys.executable, "-c", CASE, CLI, str(fake_cli), mode], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_between_commands_the_agent_stops_what_a_finished_cli_left_and_keeps_a_cli_being_started(
        tmp_path: Path) -> None:
    found = _case("sweep", tmp_path)
    assert found["adopted"] is True
    assert found["ours"] is True, "the orphaned host was not re-parented to the subreaper"
    assert found["stopped"] == 2  # the host, then its child once re-parented
    assert found["host"] is False
    assert found["grandchild"] is False
    assert found["kept"] is True, "a process named like the CLI (a command being started) was killed"


def test_on_the_way_out_the_agent_stops_every_process_it_still_has(tmp_path: Path) -> None:
    found = _case("stop", tmp_path)
    assert found["ours"] is True
    assert found["stopped"] == 2
    assert (found["host"], found["grandchild"], found["left"]) == (False, False, [])
