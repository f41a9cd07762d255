"""The Update controller's operations belong to one term of leadership (pko.runtime.Manager.on_leadership): a
replica that loses the Lease stops them — the new leader picks them up as after a restart — and the window in
which an interrupted `up` waits for its workspace counts from when this process began to lead."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

from pko.controllers.update import reconciler as update_reconciler
from pko.kube import objects


def _reconciler() -> update_reconciler.UpdateReconciler:
    nothing = cast(Any, None)  # no call reaches the API server or an agent here
    return update_reconciler.UpdateReconciler(nothing, nothing, nothing, nothing)


async def test_losing_leadership_stops_the_operations_and_a_new_term_opens_the_resume_window() -> None:
    reconciler = _reconciler()
    reconciler.started = time.monotonic() - 10 * update_reconciler.RESUME_WINDOW  # a standby up for hours
    reconciler.lead()
    assert time.monotonic() - reconciler.started < update_reconciler.RESUME_WINDOW
    key = objects.ObjectKey("ns", "u")
    operation = asyncio.create_task(asyncio.sleep(3600))
    reconciler.active[key] = operation
    await reconciler.step_down()
    assert operation.cancelled()

