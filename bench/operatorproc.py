"""The local fleet's operator in a process of its own (a script :mod:`bench.localfleet` starts, not a test):
``python -m bench.operatorproc CONFIG``.

Why: with the operator in the harness's process, the fleet's CPU and memory figures were the operator's and the
harness's together (its polling, its imports: pytest, the test bed's Git server and CA, 22 MB of them), and the
targets are the operator's. Here the operator runs alone, as the real manager and controllers of
:mod:`pko.testing.operator`, so the harness reads its CPU and peak RSS from ``/proc``; its agents are its children.

CONFIG is a JSON file: ``kubeconfig``, ``workspace_root``, ``namespace``, ``max_active_workspaces`` (or null),
``user_agent`` and ``status``, a path. Once the operator runs, and whenever the number of Stacks it has verified since
its start (:attr:`StackReconciler.verified`, what the restart phase waits for) changes, it rewrites the file at
``status`` in place (:class:`bench.proctree.StatusFile`) with ``{"verified": N, "started": T, "cpu": C, "asked": A,
"reconciles": {controller: n}}``, checking twice a second: T and C are the wall clock and the process's CPU seconds
when the operator began to start (after the imports). The reconciles (``controller_runtime_reconcile_total`` by
controller, all results) are counted only when the harness asks, with SIGUSR1, and A counts the asks answered: a
collect of that counter is a fraction of a millisecond, and reading it twice a second for a 1,000-Stack run was 1.6%
of the operator's CPU samples, the bench's cost counted as the operator's. SIGTERM stops it as a shutdown of the
operator does (its agents with it); it exits 0 then.

With ``PKO_BENCH_CPU_PROFILE=FILE`` in its environment (the bench's, which it inherits) it samples itself on its
CPU clock (:mod:`bench.cpusample`) and writes the collapsed stacks to FILE when it stops; with ``--restart`` the
restarted operator writes over the first one's. ``python -m bench.cpusample FILE`` prints the largest shares.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from bench import cpusample, proctree
from pko.runtime import eventloop, heap, metrics
from pko.testing import operator as local_operator

#: The environment variable that names a file for a profile of the operator on its CPU clock
#: (:mod:`bench.cpusample`), written when it stops.
PROFILE = "PKO_BENCH_CPU_PROFILE"

#: How often the verified count is looked at (seconds): cheap, and well inside the restart phase's resolution.
CHECK = 0.5


def read_status(path: Path) -> dict[str, Any] | None:
    """What the operator last wrote at `path` (a :class:`bench.proctree.StatusFile`; None: nothing yet)."""
    found: dict[str, Any] | None = proctree.read_json(path)
    return found


def reconciles(runtime: metrics.Metrics) -> dict[str, float]:
    """Reconciles so far by controller, whatever their result: read from the one counter, not the registry (a
    registry's collect goes through every Stack's metrics too, which at 1,000 Stacks is the operator's CPU)."""
    counts: dict[str, float] = {}
    for family in runtime.reconcile_total.collect():
        for sample in family.samples:
            if sample.name.endswith("_total"):
                name = sample.labels["controller"]
                counts[name] = counts.get(name, 0.0) + sample.value
    return counts


async def serve(config: dict[str, Any]) -> None:
    stop, asked = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, asked.set)
    status = proctree.StatusFile(Path(config["status"]))
    # when it started, by the wall clock and its own CPU clock: the restart phase counts from here (by the time
    # the harness reads the first status, a small fleet may be verified already)
    started = {"started": time.time(), "cpu": time.process_time()}
    async with local_operator.running(Path(config["kubeconfig"]), Path(config["workspace_root"]),
                                      namespace=config["namespace"],
                                      max_active_workspaces=config.get("max_active_workspaces"),
                                      user_agent=config["user_agent"],
                                      program_fs_addr=config.get("program_fs_addr", "127.0.0.1:0")) as op:
        heap.settle()  # as `pko operator` does once it is set up
        verified = op.controllers.stacks.reconciler.verified
        written: dict[str, Any] = {}
        answered: dict[str, Any] = {"asked": 0, "reconciles": {}}
        while not stop.is_set():
            if asked.is_set():
                asked.clear()
                answered = {"asked": answered["asked"] + 1, "reconciles": reconciles(op.manager.metrics)}
            now = {"verified": len(verified), **started, **answered}
            if now != written:
                written = now
                status.write(now)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_either(stop, asked), CHECK)
    status.close()


async def _either(*events: asyncio.Event) -> None:
    """Until one of `events` is set."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


def main(argv: list[str]) -> int:
    profile = os.environ.get(PROFILE)
    sampler = cpusample.Sampler() if profile else None
    if sampler:
        sampler.start()
    try:
        eventloop.run(serve(json.loads(Path(argv[0]).read_text())))  # the loop `pko operator` runs on
    finally:
        if sampler and profile:
            sampler.stop()
            sampler.write(Path(profile))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
