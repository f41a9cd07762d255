"""All of the operator's controllers on one manager: the one place `pko operator`, `pko dev` and tests wire them.

Controllers run only while the manager leads; the Program file server runs on every replica.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pko.controllers import auto
from pko.controllers.program import controller as program_controller
from pko.controllers.stack import setup as stack_setup
from pko.kube import client as kclient
from pko.runtime import manager


@dataclass
class Controllers:
    manager: manager.Manager
    auto: auto.AutoControllers
    stacks: stack_setup.StackController
    programs: program_controller.Programs

    async def run(self) -> None:
        """Run the manager and the file server until cancelled, then stop in-flight work."""
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.manager.run(), name="manager")
                group.create_task(self.programs.serve(), name="program-file-server")
        finally:
            await self.close()

    async def close(self) -> None:
        await self.stacks.close()
        await self.auto.close()


def setup(mgr: manager.Manager, client: kclient.Client, settings: auto.Settings) -> Controllers:
    automation = auto.setup(mgr, client, settings)
    stacks = stack_setup.setup(mgr, client, workers=settings.workers, retry_max_backoff=settings.retry_max_backoff)
    programs = program_controller.setup(mgr, client, listen=settings.program_fs_addr,
                                        advertised=settings.program_fs_adv_addr, workers=settings.workers)
    return Controllers(mgr, automation, stacks, programs)
