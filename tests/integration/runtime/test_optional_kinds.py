"""An optional informer (pko's own kinds, e.g. StackRollout, where only the Go operator's CRDs are installed): a kind
the API server does not serve leaves it quiet and ready (nothing to wait for), and once the CRD is installed it
lists and watches as any other informer. A kind that is not optional keeps failing loudly."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import pytest

from pko import kube
from pko.runtime import Informer, informer

Eventually = Callable[..., Awaitable[None]]

GADGET = kube.register(kube.Kind("optional.pko.dev/v1", "Gadget", "gadgets"))
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.optional.pko.dev"},
    "spec": {
        "group": "optional.pko.dev", "scope": "Namespaced",
        "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget", "listKind": "GadgetList"},
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
            "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}


async def test_an_optional_kind_waits_quietly_until_its_crd_is_installed(
    client: kube.Client, namespace: str, eventually: Eventually, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(informer, "ABSENT_RETRY", 0.3)
    optional = Informer(client, GADGET, namespace=namespace, optional=True)
    strict = Informer(client, GADGET, namespace=namespace, max_backoff=0.2)
    caplog.set_level(logging.INFO, logger="pko.runtime.informer")
    tasks = [asyncio.create_task(optional.run()), asyncio.create_task(strict.run())]
    try:
        async def absent() -> bool:
            return optional.absent and optional.synced
        await eventually(absent, "the optional informer to find the kind absent")
        await asyncio.sleep(1.0)
        said = [r for r in caplog.records if "Gadget" in r.getMessage()]
        assert sum("does not serve this kind" in r.getMessage() for r in said) == 1  # once, at INFO
        assert all(r.levelno == logging.WARNING for r in said if "does not serve" not in r.getMessage())
        assert any(r.levelno == logging.WARNING for r in said), "the strict informer keeps saying it fails"
        assert not strict.synced

        await client.apply(CRD)

        async def created() -> bool:
            try:
                await client.create({"apiVersion": "optional.pko.dev/v1", "kind": "Gadget",
                                     "metadata": {"name": "g1", "namespace": namespace}})
            except kube.NotFound:
                return False  # not served yet
            return True
        await eventually(created, "the new kind to be served")

        async def listed() -> bool:
            return [o["metadata"]["name"] for o in optional.store.list()] == ["g1"] and not optional.absent
        await eventually(listed, "the optional informer to list the new kind", timeout=60)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(kube.ApiError):
            await client.delete(kube.resources.CUSTOM_RESOURCE_DEFINITION, "gadgets.optional.pko.dev")
