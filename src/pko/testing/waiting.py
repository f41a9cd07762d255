"""Waiting for objects in tests and `pko dev`: poll the API server until a condition holds, fail with the status.

Polling (rather than watching) keeps these helpers independent of the runtime under test; a failure message
always carries the object's last status so a red test says what state things were left in.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from pko.kube import client as kclient
from pko.kube import objects, resources

Object = dict[str, Any]


def condition(obj: Object | None, type_: str) -> Object:
    """The condition of `type_` on `obj` ({} when absent, or when there is no object)."""
    return objects.condition(obj or {}, type_)


async def wait_for(client: kclient.Client, kind: resources.Kind, name: str, namespace: str,
                   test: Callable[[Object], bool], timeout: float = 300.0,
                   seen: Callable[[Object], None] | None = None) -> Object:
    """Poll until `test(obj)` holds; `seen` gets every observed version (to record what went by)."""
    deadline = time.monotonic() + timeout
    obj: Object | None = None
    while time.monotonic() < deadline:
        obj = await client.get_or_none(kind, name, namespace)
        if obj is not None:
            if seen is not None:
                seen(obj)
            if test(obj):
                return obj
        await asyncio.sleep(0.5)
    raise AssertionError(f"{kind.kind} {namespace}/{name} not there after {timeout:.0f}s; status: "
                         f"{json.dumps((obj or {}).get('status'), indent=1)}")


async def wait_gone(client: kclient.Client, kind: resources.Kind, name: str, namespace: str,
                    timeout: float = 300.0) -> None:
    """Poll until the object no longer exists."""
    deadline = time.monotonic() + timeout
    obj: Object | None = None
    while time.monotonic() < deadline:
        obj = await client.get_or_none(kind, name, namespace)
        if obj is None:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"{kind.kind} {namespace}/{name} still there after {timeout:.0f}s; status: "
                         f"{json.dumps(obj.get('status') if obj else None, indent=1)}")
