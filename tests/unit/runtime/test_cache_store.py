"""The informer cache: indexes follow updates and deletes, and a relist yields exactly the missed changes."""

from __future__ import annotations

from typing import Any

import pytest

from pko.runtime import store


def cm(name: str, rv: str, ns: str = "n", program: str | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": name, "namespace": ns, "resourceVersion": rv}}
    if program:
        obj["data"] = {"program": program}
    return obj


def by_program(obj: dict[str, Any]) -> list[str]:
    program = (obj.get("data") or {}).get("program")
    return [program] if program else []


def test_upsert_reports_added_then_modified_with_old_state() -> None:
    s = store.Store()
    assert s.upsert(cm("a", "1")).type == "ADDED"
    event = s.upsert(cm("a", "2"))
    assert (event.type, event.old) == ("MODIFIED", cm("a", "1"))
    assert len(s) == 1


def test_indexes_follow_updates_and_deletes() -> None:
    s = store.Store({"program": by_program})
    s.upsert(cm("a", "1", program="p"))
    s.upsert(cm("b", "1", program="p"))
    s.upsert(cm("c", "1", ns="other", program="q"))
    assert [o["metadata"]["name"] for o in s.by_index("program", "p")] == ["a", "b"]
    s.upsert(cm("a", "2", program="q"))
    assert [o["metadata"]["name"] for o in s.by_index("program", "q")] == ["a", "c"]
    s.delete(cm("b", "3"))
    assert s.by_index("program", "p") == []
    assert [o["metadata"]["name"] for o in s.list("n")] == ["a"]
    with pytest.raises(KeyError):
        s.by_index("nope", "x")


def test_late_indexer_covers_existing_objects() -> None:
    s = store.Store()
    s.upsert(cm("a", "1", program="p"))
    s.add_indexer("program", by_program)
    assert len(s.by_index("program", "p")) == 1
    with pytest.raises(ValueError, match="exists"):
        s.add_indexer("program", by_program)


def test_relist_diff_adds_updates_and_deletes_what_the_watch_missed() -> None:
    s = store.Store()
    for obj in (cm("same", "1"), cm("changed", "1"), cm("gone", "1")):
        s.upsert(obj)
    changes = s.replace([cm("same", "1"), cm("changed", "2"), cm("new", "5")])
    summary = sorted((e.type, e.object["metadata"]["name"]) for e in changes)
    assert summary == [("ADDED", "new"), ("DELETED", "gone"), ("MODIFIED", "changed")]
    deleted = next(e for e in changes if e.type == "DELETED")
    assert deleted.object == cm("gone", "1")  # the last known state
    assert sorted(k.name for k in s.keys())  # noqa: SIM118 (Store.keys, not a dict) == ["changed", "new", "same"]
    assert s.replace([cm("same", "1"), cm("changed", "2"), cm("new", "5")]) == []


def test_a_relist_tells_an_object_made_again_under_its_name_as_gone_and_new() -> None:
    """Deleted and made again while the watch was down: another uid, a generation that starts over. As one object's
    change, a predicate on generation would let it by and its controller never see the new one."""
    def made(uid: str, rv: str) -> dict[str, Any]:
        obj = cm("w", rv)
        obj["metadata"].update(uid=uid, generation=1)
        return obj
    s = store.Store()
    s.upsert(made("first", "1"))
    changes = s.replace([made("second", "9")])
    assert [(e.type, e.object["metadata"]["uid"]) for e in changes] == [("DELETED", "first"), ("ADDED", "second")]
    assert s.replace([made("second", "10")])[0].type == "MODIFIED"  # the same object changed: a change


def test_informer_default_transform_drops_managed_fields_without_mutating() -> None:
    from pko.runtime import informer

    obj = cm("a", "1")
    obj["metadata"]["managedFields"] = [{"manager": "x"}]
    slim = informer.strip_managed_fields(obj)
    assert "managedFields" not in slim["metadata"]
    assert slim["metadata"]["name"] == "a"
    assert obj["metadata"]["managedFields"] == [{"manager": "x"}]
    assert informer.strip_managed_fields(slim) is slim


def test_every_read_is_a_copy_of_its_own_and_the_stored_object_is_not_the_caller_s() -> None:
    s = store.Store({"program": by_program})
    given = cm("a", "1", program="p")
    s.upsert(given)
    given["data"]["program"] = "changed by the caller after the upsert"
    read = s.get(store_key("a"))
    assert read == cm("a", "1", program="p")
    read["metadata"]["name"] = "changed by a reader"
    assert s.get(store_key("a")) == cm("a", "1", program="p")
    assert s.by_index("program", "p") == [cm("a", "1", program="p")]
    assert s.by_index("program", "p")[0] is not s.by_index("program", "p")[0]


def test_an_object_msgpack_cannot_carry_is_kept_as_it_is() -> None:
    s = store.Store()
    huge = cm("a", "1")
    huge["data"] = {"n": 2**70}  # JSON allows it; msgpack does not
    s.upsert(huge)
    assert s.get(store_key("a")) == huge
    assert s.get(store_key("a")) is not huge
    event = s.upsert(cm("a", "2"))
    assert event.old == huge
    assert s.replace([]) == [store.Event("DELETED", cm("a", "2"))]


def test_an_indexer_runs_once_a_stored_version() -> None:
    calls: list[str] = []

    def counted(obj: dict[str, Any]) -> list[str]:
        calls.append(obj["metadata"]["resourceVersion"])
        return by_program(obj)

    s = store.Store({"program": counted})
    s.upsert(cm("a", "1", program="p"))
    s.upsert(cm("a", "2", program="q"))
    s.delete(cm("a", "3"))
    assert calls == ["1", "2"]  # the old version's values were kept, not computed again to unindex it
    assert s.by_index("program", "p") == s.by_index("program", "q") == []


def store_key(name: str, ns: str = "n") -> Any:
    from pko.kube.objects import ObjectKey
    return ObjectKey(ns, name)
