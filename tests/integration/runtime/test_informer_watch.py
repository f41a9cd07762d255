"""Informers against the real API server: create/update/delete reach the cache and the handlers; a watch that
resumes from a compacted resourceVersion gets 410 Gone and relists, delivering what it missed (deletions too)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pko import kube
from pko.kube import ObjectKey, resources
from pko.runtime import Event, Informer

Eventually = Callable[..., Awaitable[None]]


@contextlib.asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(informer.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def recorder() -> tuple[list[tuple[str, str]], Callable[[Event], None]]:
    seen: list[tuple[str, str]] = []

    def handle(event: Event) -> None:
        seen.append((event.type, event.object["metadata"]["name"]))

    return seen, handle


async def test_informer_follows_create_update_delete(
    client: kube.Client, namespace: str, eventually: Eventually
) -> None:
    await client.create(resources.CONFIG_MAP.new("before", namespace, data={"team": "a"}))
    informer = Informer(client, resources.CONFIG_MAP, namespace=namespace,
                        indexers={"team": lambda o: [(o.get("data") or {}).get("team", "")]})
    seen, handle = recorder()
    async with running(informer):
        await asyncio.wait_for(informer.wait_synced(), 60)
        informer.add_handler(handle)  # replays what is cached
        assert ("ADDED", "before") in seen
        await client.create(resources.CONFIG_MAP.new("cm", namespace, data={"team": "a"}))
        await eventually(lambda: ("ADDED", "cm") in seen, "the creation")
        await client.patch("ConfigMap", "cm", {"data": {"team": "b"}}, namespace)
        await eventually(lambda: ("MODIFIED", "cm") in seen, "the update")
        cached = informer.store.get(ObjectKey(namespace, "cm"))
        assert cached is not None
        assert cached["data"] == {"team": "b"}
        assert [o["metadata"]["name"] for o in informer.store.by_index("team", "b")] == ["cm"]
        await client.delete("ConfigMap", "cm", namespace)
        await eventually(lambda: ("DELETED", "cm") in seen, "the deletion")
        assert informer.store.get(ObjectKey(namespace, "cm")) is None
        assert informer.store.by_index("team", "b") == []
    assert informer.relists == 1


def event(name: str, namespace: str) -> dict[str, Any]:
    return resources.EVENT.new(name, namespace, type="Normal", reason="Test", message=name,
                               involvedObject={"kind": "ConfigMap", "name": "x", "namespace": namespace})


async def test_informer_relists_after_410_and_delivers_missed_changes(
    client: kube.Client, namespace: str, eventually: Eventually, compact_etcd: Callable[[str], None]
) -> None:
    # Core Events bypass the API server's watch cache, so their watches are served by etcd, which answers
    # "410 Gone" for revisions it has compacted away — exactly what an informer sees after a long disconnect.
    await client.create(event("kept", namespace))
    await client.create(event("removed", namespace))
    informer = Informer(client, resources.EVENT, namespace=namespace)
    seen, handle = recorder()
    informer.add_handler(handle)
    async with running(informer):
        await eventually(lambda: {("ADDED", "kept"), ("ADDED", "removed")} <= set(seen), "the initial list")
    stale = informer.resource_version
    assert stale

    # While the informer is away: one object appears, one goes, and etcd forgets the history.
    await client.create(event("appeared", namespace))
    await client.delete("Event", "removed", namespace)
    compact_etcd((await client.list("Event", namespace)).resource_version)

    seen.clear()
    async with running(informer):
        await eventually(lambda: informer.relists == 2, "a relist after 410 Gone")
        await eventually(lambda: {("ADDED", "appeared"), ("DELETED", "removed")} <= set(seen), "the missed changes")
        assert sorted(k.name for k in informer.store.keys()) == ["appeared", "kept"]  # noqa: SIM118
        await client.create(event("later", namespace))
        await eventually(lambda: ("ADDED", "later") in seen, "events after the relist")
    assert informer.resource_version != stale


async def test_informer_resumed_from_a_compacted_version_relists(
    client: kube.Client, namespace: str, eventually: Eventually, compact_etcd: Callable[[str], None]
) -> None:
    await client.create(event("present", namespace))
    compact_etcd((await client.list("Event", namespace)).resource_version)
    informer = Informer(client, resources.EVENT, namespace=namespace, resource_version="1")
    async with running(informer):
        await eventually(lambda: informer.synced and informer.relists == 1, "a relist instead of the resume")
        assert [k.name for k in informer.store.keys()] == ["present"]  # noqa: SIM118
