"""A bench run stopped with SIGTERM cleans up as one stopped with Ctrl-C: the coroutine's own cleanup runs, awaits
included, before the process ends (a killed run used to leave its Git daemon and folders behind)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import asyncio, sys
from bench import harness

async def run() -> None:
    try:
        print("running", flush=True)
        await asyncio.sleep(60)
    finally:
        await asyncio.sleep(0.05)  # an asynchronous cleanup, like stopping a daemon
        open(sys.argv[1], "w").write("cleaned up")

if sys.argv[2] == "stop":
    harness.stop_on_term()
asyncio.run(run())
"""


def _terminated(tmp_path: Path, mode: str) -> tuple[int, bool]:
    marker = tmp_path / f"cleaned-{mode}"
    process = subprocess.Popen([sys.executable, "-c", SCRIPT, str(marker), mode], stdout=subprocess.PIPE,
                               cwd=Path(__file__).parents[3])
    assert process.stdout is not None
    assert process.stdout.readline().strip() == b"running"
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout=30), marker.exists()


def test_sigterm_runs_the_cleanup(tmp_path: Path) -> None:
    code, cleaned = _terminated(tmp_path, "stop")
    assert cleaned
    assert code != 0


def test_without_it_a_sigterm_skips_the_cleanup(tmp_path: Path) -> None:
    code, cleaned = _terminated(tmp_path, "plain")
    assert not cleaned
    assert code == -signal.SIGTERM
