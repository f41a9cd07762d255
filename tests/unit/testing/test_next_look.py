"""`waiting.next_look`: what a controller scheduled for a key, read from its own queue (so a test can show that no
retry is coming without waiting for one)."""

from __future__ import annotations

import pytest

from pko.kube import objects
from pko.runtime import controller as ctl
from pko.testing import waiting

KEY = objects.ObjectKey("ns", "app")


async def _never(key: objects.ObjectKey) -> None:
    raise AssertionError("not run in this test")


async def test_nothing_scheduled_is_none() -> None:
    controller = ctl.Controller("test", _never)
    assert waiting.next_look(controller, KEY) is None
    controller.queue.add(KEY)  # queued now: not a scheduled look
    assert waiting.next_look(controller, KEY) is None


async def test_a_requeue_after_is_the_seconds_left() -> None:
    controller = ctl.Controller("test", _never)
    controller.queue.add_after(KEY, 30.0)
    assert waiting.next_look(controller, KEY) == pytest.approx(30.0, abs=1.0)
    controller.queue.add_after(KEY, 5.0)  # the earlier deadline wins
    assert waiting.next_look(controller, KEY) == pytest.approx(5.0, abs=1.0)
    assert waiting.next_look(controller, objects.ObjectKey("ns", "other")) is None
    controller.queue.shutdown()
