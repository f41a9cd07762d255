"""Agent start-up, pko's executable against the Go agent (a script, not a test): ``python -m bench.agent_startup``.

Three figures per agent, each the wall time of a whole process started the way a workspace pod starts it:

* first run: ``agent version`` of a fresh copy of the executable (as the pod's ``bootstrap`` container makes it),
  exec to exit — pko's executable unpacks itself beside itself on its first run (see tools/agent-bin/launcher.c);
* version: ``agent version`` from exec to exit — the bare cost of starting the executable;
* init: ``agent init`` of a local git repository (``file://``, one small commit) into a fresh directory, exec to
  exit — what the pod's ``fetch`` init container costs;
* listening: ``agent serve --skip-install`` on a YAML project, from exec to the first accepted TCP connection on
  its port — how long the operator's first dial has to wait. Both agents run ``pulumi version`` before they listen
  (the Go agent through the Automation API), so that CLI's own start-up is a floor under both figures.

Runs alternate pko, Go, pko, Go ... after one warm-up of each, so a drift of the shared machine hits both alike;
the medians are quoted with min and max. The last line is ``startup: pko/go = <ratio>`` of the listening medians.

    python -m bench.agent_startup                                  # $PKO_BIN_DIR/pko-agent vs pko-go-agent
    python -m bench.agent_startup --pko-agent PATH --runs 9

The pulumi CLI is taken from ``$PKO_BIN_DIR`` (``make tools``); build pko's executable with ``make agent-bin``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pko.testing import binaries, ports, pulumi

LISTEN_TIMEOUT = 60.0
POLL = 0.002

Measure = Callable[[Path], float]


def time_exit(argv: list[str], env: dict[str, str]) -> float:
    """Seconds from exec to exit of `argv`; a failure is an error, not a figure."""
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=120)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with {done.returncode}:\n{done.stderr[-2000:]}")
    return elapsed


def _accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def time_listening(argv: list[str], env: dict[str, str], log: Path) -> float:
    """Seconds from exec of ``argv + [--port P]`` to the first connection accepted on P; then SIGTERM it."""
    port = ports.free_port()
    with log.open("wb") as out:
        start = time.perf_counter()
        process = subprocess.Popen([*argv, "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            while not _accepts(port):
                if process.poll() is not None:
                    raise RuntimeError(f"{argv[0]} exited with {process.returncode}:\n{log.read_text()[-2000:]}")
                if time.perf_counter() - start > LISTEN_TIMEOUT:
                    raise RuntimeError(f"{argv[0]} did not listen in {LISTEN_TIMEOUT:.0f}s:\n{log.read_text()[-2000:]}")
                time.sleep(POLL)
            elapsed = time.perf_counter() - start
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    return elapsed


class Bed:
    """The files the agents work on: a git repository to init from and a YAML project to serve."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = pulumi.pulumi_env(root / "pulumi")
        repo = root / "repo"
        repo.mkdir()
        (repo / "Pulumi.yaml").write_text("name: startup\nruntime: yaml\n")
        git = ["git", "-C", str(repo), "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
        subprocess.run([*git, "init", "-q"], check=True)
        subprocess.run([*git, "add", "."], check=True)
        subprocess.run([*git, "commit", "-qm", "program"], check=True)
        self.revision = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True,
                                       text=True).stdout.strip()
        self.repo_url = repo.as_uri()
        self.workspace = root / "workspace"
        self.workspace.mkdir()
        (self.workspace / "Pulumi.yaml").write_text("name: startup\nruntime: yaml\n")
        self._runs = 0

    def first_run(self, agent: Path) -> float:
        self._runs += 1
        share = self.root / f"share-{self._runs}"
        share.mkdir()
        copy = share / "agent"
        shutil.copy2(agent, copy)
        try:
            return time_exit([str(copy), "version"], self.env)
        finally:
            shutil.rmtree(share, ignore_errors=True)

    def version(self, agent: Path) -> float:
        return time_exit([str(agent), "version"], self.env)

    def init(self, agent: Path) -> float:
        self._runs += 1
        target = self.root / f"init-{self._runs}"
        try:
            return time_exit([str(agent), "init", "-t", str(target), "--git-url", self.repo_url,
                              "--git-revision", self.revision], self.env)
        finally:
            shutil.rmtree(target, ignore_errors=True)

    def listening(self, agent: Path) -> float:
        self._runs += 1
        return time_listening([str(agent), "serve", "-w", str(self.workspace), "--skip-install",
                               "--host", "127.0.0.1"], self.env, self.root / f"serve-{self._runs}.log")


def alternate(measure: Measure, agents: dict[str, Path], runs: int, warmup: int) -> dict[str, list[float]]:
    """`runs` figures per agent, taken in turn after `warmup` uncounted runs of each."""
    figures: dict[str, list[float]] = {name: [] for name in agents}
    for i in range(warmup + runs):
        for name, path in agents.items():
            elapsed = measure(path)
            if i >= warmup:
                figures[name].append(elapsed)
    return figures


def _row(label: str, values: list[float]) -> str:
    return f"  {label:<4} median {statistics.median(values):6.3f} s   min {min(values):6.3f}   max {max(values):6.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.agent_startup", description=__doc__.splitlines()[0])
    parser.add_argument("--pko-agent", type=Path, default=binaries.bin_dir() / "pko-agent",
                        help="pko's agent executable (default: $PKO_BIN_DIR/pko-agent, from `make agent-bin`)")
    parser.add_argument("--go-agent", type=Path, default=binaries.bin_dir() / "pko-go-agent",
                        help="the Go reference agent (default: $PKO_BIN_DIR/pko-go-agent)")
    parser.add_argument("--runs", type=int, default=7, help="counted runs per figure and agent (default 7)")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted runs of each first (default 1)")
    args = parser.parse_args(argv)
    agents = {"pko": args.pko_agent.resolve(), "go": args.go_agent.resolve()}
    for name, path in agents.items():
        if not os.access(path, os.X_OK):
            parser.error(f"the {name} agent {path} is not an executable")
    print(f"pko agent: {agents['pko']} ({agents['pko'].stat().st_size / 1e6:.1f} MB)")
    print(f"go agent:  {agents['go']} ({agents['go'].stat().st_size / 1e6:.1f} MB)")
    print(f"{args.runs} runs each after {args.warmup} warm-up, alternating; {os.cpu_count()} CPUs", flush=True)
    ratio = 0.0
    with tempfile.TemporaryDirectory(prefix="pko-bench-startup-") as tmp:
        bed = Bed(Path(tmp))
        scenarios = (("first run", bed.first_run), ("version", bed.version), ("init", bed.init),
                     ("listening", bed.listening))
        for name, measure in scenarios:
            figures = alternate(measure, agents, args.runs, args.warmup)
            ratio = statistics.median(figures["pko"]) / statistics.median(figures["go"])
            print(f"{name}:")
            for agent, values in figures.items():
                print(_row(agent, values))
            print(f"  pko/go {ratio:.2f}", flush=True)
    print(f"startup: pko/go = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
