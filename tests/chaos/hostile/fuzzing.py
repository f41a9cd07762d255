"""What the fuzzed-spec tests share: drawing a fixed set of hypothesis examples, catching logged tracebacks, and
reading an object's conditions."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pko.kube import client as kclient
from pko.kube import resources


def draw(strategy: st.SearchStrategy[Any], count: int) -> list[Any]:
    """`count` examples of `strategy`, the same ones every run (derandomized, no example database)."""
    drawn: list[Any] = []

    @settings(max_examples=count, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(value: Any) -> None:
        drawn.append(value)

    collect()
    return drawn[:count]


class Tracebacks(logging.Handler):
    """Keeps every record logged with an exception attached: an unexpected exception escaped a reconcile (the
    controller logs an expected kind without one: pko.runtime.controller.expected)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(record)


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []}


async def settle(kc: kclient.Client, kind: resources.Kind, namespace: str, names: Iterable[str],
                 settled: Callable[[dict[str, Any]], bool], timeout: float
                 ) -> tuple[set[str], dict[str, tuple[Any, dict[str, dict[str, Any]]]]]:
    """Polls the objects `names` until each is `settled` or `timeout` seconds have passed. Returns the names still
    unsettled, and the last spec and conditions seen of every object."""
    deadline = time.monotonic() + timeout
    pending = set(names)
    last: dict[str, tuple[Any, dict[str, dict[str, Any]]]] = {}
    while pending and time.monotonic() < deadline:
        for name in sorted(pending):
            obj = await kc.get(kind, name, namespace)
            last[name] = (obj.get("spec"), conditions(obj))
            if settled(obj):
                pending.discard(name)
        await asyncio.sleep(1)
    return pending, last

