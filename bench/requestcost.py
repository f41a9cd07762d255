"""The operator's own CPU for one API request (a script, not a test): ``python -m bench.requestcost``.

Why: at fleet scale the operator's CPU follows its request count (docs/performance.md: some 30 requests a Stack,
most of them status writes and events), so what one request costs pko's client — aiohttp, TLS, JSON —
is the floor under its CPU a Stack, whatever the reconcilers do. This starts a fresh control plane (etcd and
kube-apiserver from the test bed), sends each kind of request the reconcilers send most, one after the other, and
prints the client process's CPU and the wall time a request. The API server's own CPU is not counted.

    python -m bench.requestcost              # 400 of each
    python -m bench.requestcost --requests 2000
"""

from __future__ import annotations

import argparse
import asyncio
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

NAMESPACE = "default"


@dataclass(frozen=True)
class Cost:
    """`requests` requests of one kind took `cpu` seconds of this process's CPU and `wall` seconds."""

    kind: str
    requests: int
    cpu: float
    wall: float

    def line(self) -> str:
        return (f"  {self.kind:<28}{1000 * self.cpu / self.requests:>8.2f}{1000 * self.wall / self.requests:>10.2f}")


def _config_map(i: int, value: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{i}", "namespace": NAMESPACE},
            "data": {"k": value * 100}}


def _event(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"e{i}", "namespace": NAMESPACE},
            "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": f"c{i}", "namespace": NAMESPACE},
            "reason": "Measured", "message": "one request", "type": "Normal"}


def kinds(kc: kclient.Client) -> list[tuple[str, Callable[[int], Awaitable[object]]]]:
    """The requests measured, in order (each later one finds the objects the first made)."""
    return [
        ("create", lambda i: kc.create(_config_map(i, "v"))),
        ("get", lambda i: kc.get_or_none(resources.CONFIG_MAP, f"c{i}", NAMESPACE)),
        ("server-side apply", lambda i: kc.apply(_config_map(i, "w"), field_manager="pko-bench")),
        ("create an event", lambda i: kc.create(_event(i))),
        ("list by label (0 found)", lambda i: kc.list(resources.CONFIG_MAP, NAMESPACE, labels={"absent": str(i)})),
    ]


async def measure(kubeconfig: Path, requests: int) -> list[Cost]:
    async with kclient.Client.from_kubeconfig(kubeconfig) as kc:
        await kc.get_or_none(resources.CONFIG_MAP, "warm-up", NAMESPACE)  # the connection and its TLS handshake
        costs = []
        for kind, send in kinds(kc):
            cpu, wall = time.process_time(), time.monotonic()
            for i in range(requests):
                await send(i)
            costs.append(Cost(kind, requests, time.process_time() - cpu, time.monotonic() - wall))
        return costs


def report(costs: Sequence[Cost]) -> str:
    header = f"  {'request':<28}{'CPU ms':>8}{'wall ms':>10}"
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
            costs = asyncio.run(measure(plane.kubeconfig, args.requests))
        finally:
            plane.stop()
    print(report(costs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
