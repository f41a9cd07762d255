"""Helpers of the Program tests: the Program controller and file server running in this process, and waiting."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from pko import runtime
from pko.controllers import program
from pko.kube import client as kclient
from pko.testing import waiting

LIVENESS = 60.0
"""How long a test waits for something that must happen before calling it a failure (never a speed target)."""

Eventually = Callable[..., Awaitable[None]]


@dataclass
class Running:
    manager: runtime.Manager
    programs: program.Programs
    registry: CollectorRegistry

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        return self.registry.get_sample_value(name, labels or {})


@contextlib.asynccontextmanager
async def running(client: kclient.Client, namespace: str, *, run_manager: bool = True,
                  advertised: str | None = None) -> AsyncIterator[Running]:
    """A manager watching ``namespace`` with the Program controller, and the file server on a free loopback port.
    Without ``run_manager`` only the file server runs (as on a replica whose controllers are not running)."""
    registry = CollectorRegistry()
    mgr = runtime.Manager(client, namespace=namespace, health_address="0", metrics_address="0", registry=registry)
    programs = program.setup(mgr, client, listen="127.0.0.1:0", advertised=advertised, env={}, workers=2)
    tasks = [asyncio.create_task(programs.serve(), name="program-file-server")]
    if run_manager:
        tasks.append(asyncio.create_task(mgr.run(), name="manager"))
    try:
        await asyncio.wait_for(programs.server.advertised(), timeout=LIVENESS)
        yield Running(mgr, programs, registry)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def eventually(condition: Callable[[], bool | Awaitable[bool]], what: str, timeout: float = LIVENESS) -> None:
    await waiting.eventually(condition, what, timeout)
