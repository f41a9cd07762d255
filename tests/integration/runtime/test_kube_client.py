"""pko.kube.Client against the real API server: apply with field managers, status apply, errors, list, watch."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from pko import kube
from pko.kube import resources


async def test_apply_creates_then_updates_with_our_field_manager(client: kube.Client, namespace: str) -> None:
    cm = resources.CONFIG_MAP.new("applied", namespace, data={"a": "1"})
    created = await client.apply(cm)
    assert created["data"] == {"a": "1"}
    managers = [m["manager"] for m in created["metadata"]["managedFields"]]
    assert managers == [kube.FIELD_MANAGER]
    updated = await client.apply(resources.CONFIG_MAP.new("applied", namespace, data={"b": "2"}))
    assert updated["data"] == {"b": "2"}  # fields this manager no longer states are removed
    assert await client.get("ConfigMap", "applied", namespace) == updated


async def test_apply_conflict_needs_force(client: kube.Client, namespace: str) -> None:
    await client.apply(resources.CONFIG_MAP.new("shared", namespace, data={"k": "mine"}), field_manager="first")
    with pytest.raises(kube.Conflict):
        await client.apply(resources.CONFIG_MAP.new("shared", namespace, data={"k": "yours"}),
                           field_manager="second", force=False)
    taken = await client.apply(resources.CONFIG_MAP.new("shared", namespace, data={"k": "yours"}),
                               field_manager="second")
    assert taken["data"] == {"k": "yours"}


async def test_status_apply_writes_only_status(client: kube.Client, namespace: str) -> None:
    # Our CRDs are not installed here; a Service has a status subresource with standard conditions.
    svc = resources.SERVICE.new("svc", namespace, spec={"ports": [{"port": 80}], "selector": {"a": "b"}})
    await client.apply(svc)
    status = {"conditions": [{"type": "Ready", "status": "True", "reason": "Test", "message": "applied",
                              "lastTransitionTime": "2026-01-01T00:00:00Z"}], "loadBalancer": {}}
    written = await client.apply_status({**resources.SERVICE.new("svc", namespace), "status": status},
                                        field_manager="pulumi-kubernetes-operator/test-status")
    assert written["status"]["conditions"] == status["conditions"]
    assert written["spec"]["ports"][0]["port"] == 80
    managers = {m["manager"]: m.get("subresource") for m in written["metadata"]["managedFields"]}
    assert managers["pulumi-kubernetes-operator/test-status"] == "status"


async def test_apply_carries_characters_yaml_refuses(client: kube.Client, namespace: str) -> None:
    # The API server reads an apply body as YAML: raw C1 controls, DEL or U+FFFE in it were a 400 ("control
    # characters are not allowed") for every apply of a status that quotes such a value, and a raw NEL came back as
    # a space.
    text = "a\x80b\x85c\x9f\x7f\ufffe\uffff\u00e9\U0001f600\u2028d\u2029 \\u0080"
    applied = await client.apply(resources.CONFIG_MAP.new("odd", namespace, data={"k": text}))
    assert applied["data"] == {"k": text}
    svc = resources.SERVICE.new("odd", namespace, spec={"ports": [{"port": 80}], "selector": {"a": "b"}})
    await client.apply(svc)
    condition = {"type": "Ready", "status": "False", "reason": "Test", "message": text,
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
    written = await client.apply_status({**resources.SERVICE.new("odd", namespace), "status": {
        "conditions": [condition], "loadBalancer": {}}}, field_manager="pulumi-kubernetes-operator/test-status")
    assert written["status"]["conditions"] == [condition]


async def test_errors_are_typed(client: kube.Client, namespace: str) -> None:
    with pytest.raises(kube.NotFound):
        await client.get("ConfigMap", "absent", namespace)
    assert await client.get_or_none("ConfigMap", "absent", namespace) is None
    await client.create(resources.CONFIG_MAP.new("once", namespace))
    with pytest.raises(kube.AlreadyExists):
        await client.create(resources.CONFIG_MAP.new("once", namespace))
    stale = await client.get("ConfigMap", "once", namespace)
    await client.replace({**stale, "data": {"x": "1"}})
    with pytest.raises(kube.Conflict):
        await client.replace({**stale, "data": {"x": "2"}})
    with pytest.raises(kube.Invalid):
        await client.create(resources.CONFIG_MAP.new("Not_Valid", namespace))
    with pytest.raises(ValueError, match="namespaced"):
        await client.get("ConfigMap", "x")
    await client.delete("ConfigMap", "once", namespace)
    with pytest.raises(kube.NotFound):
        await client.delete("ConfigMap", "once", namespace)
    await client.delete("ConfigMap", "once", namespace, missing_ok=True)


async def test_list_in_chunks_with_selectors(client: kube.Client, namespace: str) -> None:
    for i in range(7):
        await client.create(resources.CONFIG_MAP.new(f"c{i}", namespace, metadata={
            "name": f"c{i}", "namespace": namespace, "labels": {"parity": "even" if i % 2 == 0 else "odd"}}))
    listing = await client.list("ConfigMap", namespace, chunk_size=2)
    names = sorted(o["metadata"]["name"] for o in listing.items if o["metadata"]["name"].startswith("c"))
    assert names == [f"c{i}" for i in range(7)]
    assert listing.resource_version
    odd = await client.list("ConfigMap", namespace, labels={"parity": "odd"})
    assert sorted(o["metadata"]["name"] for o in odd.items) == ["c1", "c3", "c5"]


async def test_merge_patch(client: kube.Client, namespace: str) -> None:
    await client.create(resources.CONFIG_MAP.new("p", namespace, data={"a": "1", "b": "2"}))
    patched = await client.patch("ConfigMap", "p", {"data": {"a": None, "c": "3"}}, namespace)
    assert patched["data"] == {"b": "2", "c": "3"}


async def test_watch_streams_events_from_a_resource_version(client: kube.Client, namespace: str) -> None:
    start = (await client.list("ConfigMap", namespace)).resource_version
    events: list[tuple[str, str]] = []

    async def consume() -> None:
        async for event in client.watch("ConfigMap", namespace, resource_version=start):
            if event.type != "BOOKMARK":
                events.append((event.type, event.object["metadata"]["name"]))
            if len(events) == 3:
                return

    watching = asyncio.create_task(consume())
    await client.create(resources.CONFIG_MAP.new("w", namespace))
    await client.patch("ConfigMap", "w", {"data": {"x": "y"}}, namespace)
    await client.delete("ConfigMap", "w", namespace)
    await asyncio.wait_for(watching, 60)
    assert events == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


async def test_watch_reads_objects_with_line_separators_in_strings(client: kube.Client, namespace: str) -> None:
    # The API server's JSON carries NEL (U+0085) unescaped; a watch split at it (as str.splitlines does) could not
    # decode the event, nor any later one of the kind.
    start = (await client.list("ConfigMap", namespace)).resource_version
    odd = "a\x85b\u2028c\u2029d\x1ce\x0bf"
    seen: list[dict[str, str]] = []

    async def consume() -> None:
        async for event in client.watch("ConfigMap", namespace, resource_version=start):
            if event.type != "BOOKMARK":
                seen.append(event.object.get("data") or {})
            if len(seen) == 2:
                return

    watching = asyncio.create_task(consume())
    await client.create(resources.CONFIG_MAP.new("nel", namespace, data={"k": odd}))
    await client.create(resources.CONFIG_MAP.new("after", namespace, data={"k": "plain"}))
    await asyncio.wait_for(watching, 60)
    assert seen == [{"k": odd}, {"k": "plain"}]


async def test_watch_from_a_compacted_version_is_gone(
    client: kube.Client, namespace: str, compact_etcd: Callable[[str], None]
) -> None:
    # Core Events skip the API server's watch cache: etcd itself answers for versions it compacted away.
    def event(name: str) -> kube.Object:
        return resources.EVENT.new(name, namespace, reason="Test", message="m", type="Normal",
                                   involvedObject={"kind": "ConfigMap", "name": "x", "namespace": namespace})

    first = await client.create(event("e0"))
    for name in ("e1", "e2", "e3"):  # compaction keeps its own revision: move well past the first one
        await client.create(event(name))
    compact_etcd((await client.list("Event", namespace)).resource_version)
    with pytest.raises(kube.Gone):
        async for _ in client.watch("Event", namespace, resource_version=first["metadata"]["resourceVersion"]):
            pass


async def test_a_kind_the_server_does_not_serve_is_an_api_error(client: kube.Client, namespace: str) -> None:
    # The API server answers an unserved group/version with a plain-text 404, not a JSON Status.
    unserved = resources.Kind("nothing.example.com/v1", "Widget", "widgets")
    with pytest.raises(kube.NotFound) as raised:
        await client.get(unserved, "w", namespace)
    assert raised.value.code == 404
    assert "not found" in raised.value.message
