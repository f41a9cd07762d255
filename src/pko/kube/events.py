"""Kubernetes Events about our objects (`kubectl describe stack x` shows them), as the Go operator records them.

Events are best effort: a failure to record one is logged and swallowed, never allowed to fail a reconcile.
Callers must never put secret values in a message.
"""

from __future__ import annotations

import datetime
import logging
import os

from pko.kube import client as kclient
from pko.kube import objects, resources

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"


def event_for(obj: objects.Like, type_: str, reason: str, message: str, component: str,
              now: datetime.datetime) -> objects.Object:
    """The core/v1 Event describing `reason` on `obj` (pure)."""
    obj = objects.identity(obj)
    meta = obj.get("metadata", {})
    stamp = now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return resources.EVENT.new(
        f"{meta.get('name', 'object')}.{os.urandom(8).hex()}",
        meta.get("namespace") or "default",
        involvedObject={
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        reason=reason,
        message=message[:1024],
        type=type_,
        source={"component": component},
        reportingComponent=component,
        firstTimestamp=stamp,
        lastTimestamp=stamp,
        count=1,
    )


class Recorder:
    """Records events for one component (`stack-controller`, `workspace-controller`, ...)."""

    def __init__(self, client: kclient.Client, component: str) -> None:
        self.client = client
        self.component = component

    async def emit(self, obj: objects.Like, type_: str, reason: str, message: str) -> None:
        obj = objects.identity(obj)
        event = event_for(obj, type_, reason, message, self.component, datetime.datetime.now(datetime.UTC))
        try:
            await self.client.create(event)
        except Exception as err:  # best effort by design
            log.warning("could not record event %s on %s: %s", reason, objects.key_of(obj), err)

    async def normal(self, obj: objects.Like, reason: str, message: str) -> None:
        await self.emit(obj, NORMAL, reason, message)

    async def warning(self, obj: objects.Like, reason: str, message: str) -> None:
        await self.emit(obj, WARNING, reason, message)
