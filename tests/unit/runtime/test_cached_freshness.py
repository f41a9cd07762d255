"""When a cached copy may answer a read (pko.runtime.cachedclient): never older than this process's own last
write or read of the object, never after it deleted it."""

from __future__ import annotations

from pko.runtime import cachedclient


def _at(version: str | None) -> dict[str, object]:
    return {"metadata": {"name": "x", **({"resourceVersion": version} if version is not None else {})}}


def test_a_cached_copy_is_fresh_from_the_version_last_written() -> None:
    assert cachedclient.fresh(_at("5"), None)
    assert cachedclient.fresh(_at("5"), 5)
    assert cachedclient.fresh(_at("6"), 5)
    assert not cachedclient.fresh(_at("4"), 5)
    assert not cachedclient.fresh(_at(None), 5)
    assert not cachedclient.fresh(_at("abc"), 5)
    assert not cachedclient.fresh(_at("9"), -1)  # deleted


def test_versions_read_as_integers_only_when_they_are() -> None:
    assert cachedclient.version(_at("123")) == 123
    assert cachedclient.version(_at("")) is None
    assert cachedclient.version(_at("1e3")) is None
    assert cachedclient.version(None) is None


def test_a_written_version_is_forgotten_once_the_cache_holds_it_or_long_after_the_object_went() -> None:
    grace = cachedclient.ABSENT_GRACE
    assert cachedclient.prunable(7, 7, 0.0)  # the cache caught up: a cached read is fresh anyway
    assert cachedclient.prunable(7, 9, 0.0)
    assert not cachedclient.prunable(7, 5, grace * 10)  # the cache is behind: never, however long
    deleted = -1
    assert not cachedclient.prunable(deleted, 9, grace * 10)  # the cache still holds what this process deleted
    # not in the cache: the watch may yet bring an older copy (deleted before its creation reached the cache)
    assert not cachedclient.prunable(deleted, None, 1.0)
    assert not cachedclient.prunable(7, None, 1.0)
    assert cachedclient.prunable(deleted, None, grace + 1)
    assert cachedclient.prunable(7, None, grace + 1)  # deleted by another (a garbage-collected Update)
