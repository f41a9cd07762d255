"""Reads from the informer's cache with read-your-writes (pko.runtime.cachedclient), against the real API server:
however far the watch lags, a read never returns a version older than the client's own last write or read of
that object, a deleted object reads as gone, objects the cache does not hold are read live, and once the watch
has caught up the cache answers without a request."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from pko import kube
from pko.kube import errors, resources
from pko.runtime import Informer, cachedclient

Eventually = Callable[..., Awaitable[None]]


@contextlib.asynccontextmanager
async def informed(client: kube.Client, namespace: str) -> AsyncIterator[tuple[Informer, cachedclient.CachedClient]]:
    informer = Informer(client, resources.CONFIG_MAP, namespace=namespace)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.wait_synced(), 60)
        yield informer, cachedclient.CachedClient(client, {resources.CONFIG_MAP: informer}.get)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_read_is_never_older_than_the_clients_own_write(
    client: kube.Client, namespace: str, eventually: Eventually
) -> None:
    async with informed(client, namespace) as (informer, cached):
        created = await cached.create(resources.CONFIG_MAP.new("rw", namespace, data={"n": "0"}))
        assert (await cached.get(resources.CONFIG_MAP, "rw", namespace))["data"] == {"n": "0"}
        for n in range(1, 30):  # back to back: the watch lags behind some of these writes
            written = await cached.patch(resources.CONFIG_MAP, "rw", {"data": {"n": str(n)}}, namespace)
            read = await cached.get(resources.CONFIG_MAP, "rw", namespace)
            assert read["data"] == {"n": str(n)}
            assert cachedclient.version(read) == cachedclient.version(written)
        assert cachedclient.version(created) is not None

        # once the watch has caught up, the cache answers alone
        async def caught_up() -> bool:
            found = informer.store.get(kube.ObjectKey(namespace, "rw"))
            return cachedclient.version(found) == cachedclient.version(written)
        await eventually(caught_up, "the watch to deliver the last write")
        hits = cached.hits
        read = await cached.get(resources.CONFIG_MAP, "rw", namespace)
        assert cached.hits == hits + 1
        assert read["data"] == {"n": "29"}
        read["data"]["n"] = "mutated"  # a copy: the cache is untouched
        assert informer.store.get(kube.ObjectKey(namespace, "rw"))["data"] == {"n": "29"}

        await cached.delete(resources.CONFIG_MAP, "rw", namespace)
        with pytest.raises(errors.NotFound):  # even while the cache still holds it
            await cached.get(resources.CONFIG_MAP, "rw", namespace)


async def test_what_the_cache_does_not_hold_is_read_live(client: kube.Client, namespace: str) -> None:
    async with informed(client, namespace) as (_informer, cached):
        await client.create(resources.SECRET.new("live", namespace, data={}))
        assert (await cached.get(resources.SECRET, "live", namespace))["metadata"]["name"] == "live"  # no informer
        await client.create(resources.CONFIG_MAP.new("fresh", namespace, data={"a": "b"}))  # another client
        assert (await cached.get(resources.CONFIG_MAP, "fresh", namespace))["data"] == {"a": "b"}
        assert await cached.get_or_none(resources.CONFIG_MAP, "never", namespace) is None
        assert cached.misses >= 2  # the Secret and the missing ConfigMap (the other may be cached already)


async def test_the_versions_the_cache_caught_up_with_are_forgotten(
    client: kube.Client, namespace: str, eventually: Eventually, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every object written (an Update for each run, long gone) left its version behind, and the record grew with
    the fleet's churn: once the watch has delivered a write it is forgotten at the next prune; a deletion (or a
    write the cache does not hold) only after a grace far longer than a watch lags — the watch might still bring
    an older copy of it."""
    monkeypatch.setattr(cachedclient, "PRUNE_AT", 7)
    async with informed(client, namespace) as (informer, cached):
        now = [0.0]
        cached.clock = lambda: now[0]
        for n in range(6):
            await cached.create(resources.CONFIG_MAP.new(f"churn-{n}", namespace, data={"n": str(n)}))
        for n in range(3):
            await cached.delete(resources.CONFIG_MAP, f"churn-{n}", namespace)
        await eventually(lambda: len(informer.store) == 3, "the watch to deliver the writes and deletions")
        assert cached.remembered == 6
        await cached.create(resources.CONFIG_MAP.new("latest", namespace, data={"n": "x"}))
        # the seventh object written pruned the three writes the cache has; the three deletions stay for now,
        # as does the newest unless the watch has delivered it already
        assert cached.remembered in (3, 4)
        now[0] = cachedclient.ABSENT_GRACE + 1
        cached._prune()
        assert cached.remembered <= 1
        written = await cached.patch(resources.CONFIG_MAP, "latest", {"data": {"n": "y"}}, namespace)
        read = await cached.get(resources.CONFIG_MAP, "latest", namespace)
        assert read["data"] == {"n": "y"}
        assert cachedclient.version(read) == cachedclient.version(written)
