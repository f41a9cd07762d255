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
