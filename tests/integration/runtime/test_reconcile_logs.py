"""A reconcile's log lines, as the operator prints them, carry the object it works on — ``controller``,
``namespace``, ``name`` — as fields (console and JSON), for its own lines and the controller's; a Secret that is
missing fails the reconcile with one line and no traceback."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from prometheus_client import CollectorRegistry

from pko import kube
from pko.kube import ObjectKey, resources
from pko.runtime import Manager, Result
from pko.testing import waiting

log = logging.getLogger("pko.test.reconcile-logs")


@contextlib.asynccontextmanager
async def running(manager: Manager) -> AsyncIterator[None]:
    task = asyncio.create_task(manager.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _json_lines(streams: dict[str, io.StringIO]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in streams["json"].getvalue().splitlines()]


async def test_reconcile_lines_carry_the_object(client: kube.Client, namespace: str,
                                                printed_logs: dict[str, io.StringIO]) -> None:
    async def reconcile(key: ObjectKey) -> Result | None:
        config = await client.get(resources.CONFIG_MAP, key.name, key.namespace)
        log.info("read the settings", extra={"keys": sorted(config.get("data") or {})})
        await client.get(resources.SECRET, f"{key.name}-credentials", key.namespace)  # never created
        return None

    manager = Manager(client, namespace=namespace, health_address="0", metrics_address="0",
                      registry=CollectorRegistry())
    manager.controller("logging-test", reconcile).watch(manager.informer("ConfigMap"))
    async with running(manager):
        await client.create(resources.CONFIG_MAP.new("app", namespace, data={"greeting": "hi"}))
        await waiting.eventually(lambda: any(line.get("logger") == "pko.runtime.controller"
                                             for line in _json_lines(printed_logs)), "the reconcile to fail")

    ours = [line for line in _json_lines(printed_logs) if line.get("name") == "app"]
    read = next(line for line in ours if line["event"] == "read the settings")
    failed = next(line for line in ours if line["logger"] == "pko.runtime.controller")
    for line in (read, failed):
        assert (line["controller"], line["namespace"], line["name"]) == ("logging-test", namespace, "app")
    assert read["keys"] == ["greeting"]
    assert failed["level"] == "error"
    assert "app-credentials" in failed["event"]
    assert "exception" not in failed
    console = printed_logs["console"].getvalue()
    assert "controller=logging-test" in console
    assert f"namespace={namespace}" in console
    assert "Traceback" not in console
