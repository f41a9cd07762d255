"""Custom resources through pko.kube: a registered kind, server-side apply of spec and of the status
subresource with separate field managers, informers over it — the path Stack/Program/Workspace/Update take."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from pko import kube
from pko.kube import ObjectKey, resources
from pko.runtime import Informer

Eventually = Callable[..., Awaitable[None]]

WIDGET = kube.register(kube.Kind("test.pko.dev/v1", "Widget", "widgets"))

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.pko.dev"},
    "spec": {
        "group": "test.pko.dev",
        "scope": "Namespaced",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                "status": {"type": "object", "properties": {
                    "observedGeneration": {"type": "integer"},
                    "conditions": {"type": "array", "x-kubernetes-list-type": "map",
                                   "x-kubernetes-list-map-keys": ["type"],
                                   "items": {"type": "object", "required": ["type"], "properties": {
                                       "type": {"type": "string"}, "status": {"type": "string"}}}},
                }},
            }}},
        }],
    },
}


async def install_crd(client: kube.Client, eventually: Eventually) -> None:
    await client.apply(CRD)

    async def established() -> bool:
        crd = await client.get(resources.CUSTOM_RESOURCE_DEFINITION, "widgets.test.pko.dev")
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    await eventually(established, "the CRD to be established")


async def test_spec_and_status_apply_with_their_own_field_managers(
    client: kube.Client, namespace: str, eventually: Eventually
) -> None:
    await install_crd(client, eventually)
    informer = Informer(client, WIDGET, namespace=namespace)
    task = asyncio.create_task(informer.run())
    try:
        created = await client.apply(WIDGET.new("w", namespace, spec={"size": 1}))
        assert created["metadata"]["generation"] == 1
        status = {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]}
        written = await client.apply_status({**WIDGET.new("w", namespace), "status": status},
                                            field_manager=f"{kube.FIELD_MANAGER}/widget-status")
        assert written["status"] == status
        assert written["spec"] == {"size": 1}
        assert written["metadata"]["generation"] == 1  # status writes do not bump the generation
        managers = {(m["manager"], m.get("subresource", "")) for m in written["metadata"]["managedFields"]}
        assert managers == {(kube.FIELD_MANAGER, ""), (f"{kube.FIELD_MANAGER}/widget-status", "status")}
        # A spec apply that omits status leaves the status alone.
        again = await client.apply(WIDGET.new("w", namespace, spec={"size": 2}))
        assert again["status"] == status
        assert again["metadata"]["generation"] == 2

        def cached_size() -> object:
            cached = informer.store.get(ObjectKey(namespace, "w"))
            return None if cached is None else cached["spec"]["size"]

        await eventually(lambda: cached_size() == 2, "the informer to see the custom resource")
        await client.delete(WIDGET, "w", namespace)
        await eventually(lambda: ObjectKey(namespace, "w") not in informer.store, "the deletion")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
