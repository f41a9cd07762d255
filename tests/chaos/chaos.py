"""Shared pieces of the chaos tier: `pko operator` as a real process that can be SIGKILLed and restarted, a fleet
of Stacks on Programs (Pulumi YAML: no language host to start, so a round is quick), and the checks every fault
ends with — read from the file backends and /proc, never from the operator's own account of itself.

Each Stack has its own ``file://`` backend directory, so its lock files and update history are its own:

- a lock file left under ``.pulumi/locks`` is a stack the next `up` would refuse (``Another update is currently
  in progress``) until someone ran ``pulumi cancel``;
- the history (``.pulumi/history``) lists every `up` the CLI finished, with the config it ran with: the Stack's
  ``round`` config value says which generation an `up` was for, so two successful `up`s with one round are a
  repeated side effect;
- every process the operator starts (agents, their Pulumi CLIs and plugins) inherits ``PKO_CHAOS_RUN``, so a
  process that carries this run's value but is no descendant of a live operator is an orphan.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pko.kube import client as kclient
from pko.kube import errors, objects, resources
from pko.testing import filebackend, ports
from pko.testing.waiting import at_round, condition, eventually

RUN_ENV = "PKO_CHAOS_RUN"
PASSPHRASE = {"type": "Literal", "literal": {"value": "chaos"}}


# --- the operator as a process ---------------------------------------------------------------------------------


@dataclass
class OperatorProcess:
    """`python -m pko operator` with the `local` runtime, its log under `workdir`. `env` carries the Pulumi test
    environment and this run's :data:`RUN_ENV` marker; `flags` are extra flags (leader election, rate limits)."""

    kubeconfig: Path
    workdir: Path
    env: dict[str, str]
    flags: list[str] = field(default_factory=list)
    name: str = "operator"
    popen: subprocess.Popen[bytes] | None = None
    health: int = 0
    starts: int = 0

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def start(self) -> None:
        assert not self.alive()
        self.health = ports.free_port()
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts}\n".encode())
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "pko", "operator", "--kubeconfig", str(self.kubeconfig),
                 "--workspace-runtime", "local", "--workspace-root", str(self.workdir / "workspaces"),
                 "--health-probe-bind-address", f"127.0.0.1:{self.health}",
                 "--program-fs-addr", f"127.0.0.1:{ports.free_port()}", "--zap-log-level", "info", *self.flags],
                env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    async def ready(self, timeout: float = 90.0) -> None:
        """Until /readyz answers (a non-leader answers too: readiness is not leadership). The health port is picked
        before the operator binds it, and `make test` runs other sessions whose agents pick ports too: when another
        server answers there (an agent's gRPC speaks HTTP/2 back) or the operator could not bind it, the operator
        starts again on another port (twice at most), as the test bed's own servers do (pko.testing.ports)."""
        for attempt in (1, 2, 3):

            async def ok(url: str = f"http://127.0.0.1:{self.health}/readyz") -> bool:
                if not self.alive() and "address already in use" in self.tail().lower():
                    raise PortTaken(self.health)
                assert self.alive(), f"{self.name} exited:\n{self.tail()}"
                return await asyncio.to_thread(_http_ok, url)

            try:
                await eventually(ok, f"{self.name} /readyz", timeout, interval=0.2)
                return
            except PortTaken:
                if attempt == 3:
                    raise
                if self.alive():
                    self.kill()
                self.start()

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs; the agents get SIGTERM from the kernel (their parent-death signal)."""
        assert self.popen is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait(30)

    async def terminate(self, timeout: float = 120.0) -> int:
        if self.popen is None or self.popen.poll() is not None:
            return self.popen.returncode if self.popen else 0
        self.popen.send_signal(signal.SIGTERM)
        try:
            return await asyncio.to_thread(self.popen.wait, timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9

    def tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class PortTaken(Exception):
    """Something other than the operator holds its health port."""


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except http.client.HTTPException as err:  # not HTTP/1.1 at all: another process's server holds the port
        raise PortTaken(url) from err
    except OSError:
        return False


def run_env(pulumi_env: dict[str, str]) -> dict[str, str]:
    """The operator's environment: the Pulumi test environment plus a fresh :data:`RUN_ENV` marker."""
    return {**pulumi_env, RUN_ENV: uuid.uuid4().hex}


# --- processes ------------------------------------------------------------------------------------------------


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


def marked(run: str) -> list[int]:
    """Live (not zombie) processes that carry this run's marker in their environment."""
    needle = f"{RUN_ENV}={run}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and _state(int(entry.name)) not in ("Z", "gone"):
            found.append(int(entry.name))
    return found


def orphans(run: str, operators: list[int]) -> list[int]:
    """This run's processes that descend from none of the live `operators` (nor are one)."""
    live = set(operators)
    found = []
    for pid in marked(run):
        current: int | None = pid
        while current is not None and current > 1 and current not in live:
            current = _parent(current)
        if current not in live:
            found.append(pid)
    return found


def descendants(run: str, pid: int) -> list[int]:
    """This run's processes below `pid` (its agents, their CLIs and plugins)."""
    outside = set(orphans(run, [pid]))
    return [p for p in marked(run) if p != pid and p not in outside]


async def wait_no_orphans(run: str, operators: list[int], timeout: float = 60.0) -> list[int]:
    """Wait until this run has no orphan process (the agents of a killed operator get SIGTERM and wind their CLI
    down, which takes a moment); what is still orphaned after `timeout`, which is then SIGKILLed so one failure
    does not cascade into the next round."""
    deadline = time.monotonic() + timeout
    while True:
        left = orphans(run, operators)
        if not left or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    for pid in left:
        _DESCRIBED[pid] = _describe_one(pid)  # what it was, read before the SIGKILL empties its /proc entry
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left


_DESCRIBED: dict[int, str] = {}


def _describe_one(pid: int) -> str:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return ""
    return f"{command[:200]} (state {stat[0]}, parent {stat[1]})" if command else ""


def describe(pids: list[int]) -> str:
    """Each process's command line, state and parent: as read before :func:`wait_no_orphans` killed it."""
    return "\n".join(f"{pid}: {_DESCRIBED.get(pid) or _describe_one(pid)}" for pid in pids)


# --- the fleet ------------------------------------------------------------------------------------------------


def program(name: str, namespace: str) -> dict[str, Any]:
    """A Program exporting its `round` config: each round is a new Stack generation with a known output."""
    return resources.PROGRAM.new(name, namespace, program={
        "configuration": {"round": {"type": "String"}},
        "outputs": {"round": "${round}"},
    })


@dataclass(frozen=True)
class Member:
    name: str
    namespace: str
    backend: Path

    def stack(self, round_: int, **spec: Any) -> dict[str, Any]:
        return resources.STACK.new(self.name, self.namespace, spec={
            "stack": "dev", "programRef": {"name": self.name}, "backend": f"file://{self.backend}",
            "envRefs": {"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE}, "config": {"round": str(round_)},
            "destroyOnFinalize": True, **spec,
        })

    def locks(self) -> list[Path]:
        return filebackend.locks(self.backend)

    def succeeded_ups(self) -> Counter[str]:
        """How many `up`s succeeded with each `round` config value."""
        return filebackend.succeeded_ups(self.backend)

    def destroyed(self) -> bool:
        return filebackend.destroyed(self.backend)


async def create_fleet(kc: kclient.Client, namespace: str, root: Path, count: int, round_: int = 0,
                       **spec: Any) -> list[Member]:
    fleet = []
    for index in range(count):
        member = Member(f"s{index:03d}", namespace, root / f"state-{index:03d}")
        member.backend.mkdir(parents=True)
        await kc.create(program(member.name, namespace))
        await kc.create(member.stack(round_, **spec))
        fleet.append(member)
    return fleet


async def start_round(kc: kclient.Client, fleet: list[Member], round_: int) -> None:
    for member in fleet:
        await kc.patch(resources.STACK, member.name, {"spec": {"config": {"round": str(round_)}}}, member.namespace)


converged = at_round


async def wait_converged(kc: kclient.Client, fleet: list[Member], round_: int, timeout: float,
                         diagnostics: Any = None) -> None:
    """Until every Stack is Ready at its generation with `round_` as its output."""
    namespace = fleet[0].namespace
    names = {m.name for m in fleet}

    async def done() -> bool:
        items = (await kc.list(resources.STACK, namespace)).items
        return sum(1 for o in items if objects.name_of(o) in names and converged(o, round_)) == len(names)

    try:
        await eventually(done, f"{len(names)} Stacks Ready at round {round_}", timeout, interval=0.5)
    except AssertionError as err:
        items = (await kc.list(resources.STACK, namespace)).items
        left = {objects.name_of(o): {"generation": objects.generation_of(o),
                                     "observed": (o.get("status") or {}).get("observedGeneration"),
                                     "ready": condition(o, "Ready"), "outputs": (o.get("status") or {}).get("outputs"),
                                     "current": (o.get("status") or {}).get("currentUpdate"),
                                     "last": (o.get("status") or {}).get("lastUpdate")}
                for o in items if not converged(o, round_)}
        extra = diagnostics() if diagnostics is not None else ""
        raise AssertionError(f"{err}\nnot converged: {json.dumps(left, indent=1)[:6000]}\n{extra}") from None


async def in_flight(kc: kclient.Client, namespace: str) -> list[dict[str, Any]]:
    """The namespace's Updates that have not completed."""
    return [u for u in (await kc.list(resources.UPDATE, namespace)).items
            if condition(u, "Complete").get("status") != "True"]


async def delete_all(kc: kclient.Client, fleet: list[Member]) -> None:
    for member in fleet:
        with contextlib.suppress(errors.NotFound):
            await kc.delete(resources.STACK, member.name, member.namespace)


Tally = filebackend.Tally


def count_backends(fleet: list[Member], tally: Tally) -> None:
    """Add the fleet's finished `up`s, repeated `up`s of one round and leftover locks to `tally`."""
    for member in fleet:
        tally.count(member.name, member.backend)
