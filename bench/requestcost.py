"""The operator's own CPU for one API request (a script, not a test): ``python -m bench.requestcost``.

Why: at fleet scale the operator's CPU follows its request count (docs/performance.md: some 30 requests a Stack,
most of them status writes and events), so what one request costs pko's client — aiohttp, TLS, JSON —
is the floor under its CPU a Stack, whatever the reconcilers do. This starts a fresh control plane (etcd and
kube-apiserver from the test bed), sends each kind of request the reconcilers send most, one after the other, and
prints the client process's CPU, the wall time, and the API server's and etcd's CPU a request (from ``/proc``: the
server's side of a fleet's requests cost it more than the operator at 300 Stacks). Status writes are measured both
ways a controller can send them, server-side apply and a JSON merge patch, on Stacks (the CRDs are installed).

    python -m bench.requestcost              # 400 of each
    python -m bench.requestcost --requests 2000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import controlplane
from pko.testing import operator as local_operator

NAMESPACE = "default"


@dataclass(frozen=True)
class Cost:
    """`requests` requests of one kind took `cpu` seconds of this process's CPU and `wall` seconds."""

    kind: str
    requests: int
    cpu: float
    wall: float
    server: float = 0.0  # the API server's and etcd's CPU seconds over the same requests

    def line(self) -> str:
        each = 1000 / self.requests
        return f"  {self.kind:<28}{self.cpu * each:>8.2f}{self.wall * each:>10.2f}{self.server * each:>11.2f}"


def cpu_of(pids: Sequence[int]) -> float:
    """User and system CPU seconds of `pids` so far (``/proc/<pid>/stat``; a process gone counts 0)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime: the 14th and 15th fields
    return total / os.sysconf("SC_CLK_TCK")


def _config_map(i: int, value: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{i}", "namespace": NAMESPACE},
            "data": {"k": value * 100}}


def _event(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"e{i}", "namespace": NAMESPACE},
            "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": f"c{i}", "namespace": NAMESPACE},
            "reason": "Measured", "message": "one request", "type": "Normal"}


def _stack(i: int) -> dict[str, Any]:
    return {"apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": {"name": f"s{i}", "namespace": NAMESPACE},
            "spec": {"stack": "dev", "programRef": {"name": "p"}}}


def _stack_status(i: int, round_: int) -> dict[str, Any]:
    """A Stack's status as the reconciler writes it: its conditions and observed generation."""
    stamp = f"2026-12-04T20:{round_ % 60:02d}:00Z"
    return {"observedGeneration": 1, "lastUpdate": {"generation": 1, "name": f"s{i}-{round_}", "state": "succeeded"},
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "ProcessingCompleted", "message": f"round {round_}",
                 "lastTransitionTime": stamp, "observedGeneration": 1},
                {"type": "Reconciling", "status": "False", "reason": "ProcessingCompleted", "message": "",
                 "lastTransitionTime": stamp, "observedGeneration": 1}]}


def _status_apply(i: int, round_: int) -> dict[str, Any]:
    return {"apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": {"name": f"s{i}", "namespace": NAMESPACE},
            "status": _stack_status(i, round_)}


def kinds(kc: kclient.Client) -> list[tuple[str, Callable[[int], Awaitable[object]]]]:
    """The requests measured, in order (each later one finds the objects the first made)."""
    return [
        ("create", lambda i: kc.create(_config_map(i, "v"))),
        ("get", lambda i: kc.get_or_none(resources.CONFIG_MAP, f"c{i}", NAMESPACE)),
        ("server-side apply", lambda i: kc.apply(_config_map(i, "w"), field_manager="pko-bench")),
        ("create an event", lambda i: kc.create(_event(i))),
        ("list by label (0 found)", lambda i: kc.list(resources.CONFIG_MAP, NAMESPACE, labels={"absent": str(i)})),
        ("create a Stack", lambda i: kc.create(_stack(i))),
        ("Stack status: apply", lambda i: kc.apply_status(_status_apply(i, 1), field_manager="pko-bench")),
        ("Stack status: merge patch", lambda i: kc.patch(resources.STACK, f"s{i}", {"status": _stack_status(i, 2)},
                                                          NAMESPACE, status=True)),
        ("Stack status: apply again", lambda i: kc.apply_status(_status_apply(i, 3), field_manager="pko-bench")),
    ]


async def measure(kubeconfig: Path, requests: int, server_pids: Sequence[int] = ()) -> list[Cost]:
    async with kclient.Client.from_kubeconfig(kubeconfig) as kc:
        await local_operator.install_crds(kc)
        await kc.get_or_none(resources.CONFIG_MAP, "warm-up", NAMESPACE)  # the connection and its TLS handshake
        costs = []
        for kind, send in kinds(kc):
            await asyncio.sleep(1)  # the server's work for the last kind (watch caches, compaction) settles
            cpu, wall, server = time.process_time(), time.monotonic(), cpu_of(server_pids)
            for i in range(requests):
                await send(i)
            costs.append(Cost(kind, requests, time.process_time() - cpu, time.monotonic() - wall,
                              cpu_of(server_pids) - server))
        return costs


def server_pids(plane: controlplane.ControlPlane) -> list[int]:
    """The API server's and etcd's processes."""
    return [plane.process(name).popen.pid for name in ("kube-apiserver", "etcd")]


def report(costs: Sequence[Cost]) -> str:
    header = f"  {'request':<28}{'CPU ms':>8}{'wall ms':>10}{'server ms':>11}"
    return "\n".join(["one request, sent one after the other:", header, *(c.line() for c in costs)])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.requestcost", description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="requests of each kind (default 400)")
    args = parser.parse_args(argv)
    if args.requests < 1:
        parser.error("--requests must be at least 1")
    with tempfile.TemporaryDirectory(prefix="pko-bench-requests-") as tmp:
        plane = controlplane.start(Path(tmp) / "control-plane")
        try:
            costs = asyncio.run(measure(plane.kubeconfig, args.requests, server_pids(plane)))
        finally:
            plane.stop()
    print(report(costs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
