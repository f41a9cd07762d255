"""Kubernetes Events about our objects (`kubectl describe stack x` shows them), as the Go operator records them.

Events are best effort: a failure to record one is logged and swallowed, never allowed to fail a reconcile.
Callers must never put secret values in a message.

Like client-go's recorder (the Go operator's), an event told again — same component, object, type, reason and
message — adds to the count of the Event already posted (`kubectl describe` shows "x12 over 5m") instead of
making another object; and the repeats one component posts about one object for one reason are limited to 25 in
a burst and then one every 5 minutes: a Workspace whose agent cannot be reached for an hour leaves one Event with a
count, not 720 objects in etcd. A repeat the limit holds back still counts, so the next one posted carries the
whole count.
Unlike client-go's spam filter, the limit never holds back an event that is not a repeat: what is new is told.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import hashlib
import logging
import os
import time
from collections.abc import Callable
from typing import TypeVar

from pko.kube import client as kclient
from pko.kube import errors, objects, resources

log = logging.getLogger(__name__)

_T = TypeVar("_T")

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


#: client-go's defaults (``record.NewEventCorrelator``): the events remembered, the burst one component may tell
#: about one object, and the seconds after which it may tell one more.
REMEMBERED = 4096
SPAM_BURST = 25
SPAM_REFILL = 300.0


def digest(*parts: object) -> bytes:
    """A key of the correlator's: 16 bytes for what it tells apart (a message of a kilobyte is not kept for it; a
    thousand Stacks' events would hold megabytes)."""
    return hashlib.blake2b("\0".join(str(part) for part in parts).encode(), digest_size=16).digest()


def _object_parts(event: objects.Object, component: str) -> tuple[str, ...]:
    involved = event.get("involvedObject") or {}
    return (component, str(involved.get("apiVersion")), str(involved.get("kind")), str(involved.get("namespace")),
            str(involved.get("name")), str(involved.get("uid")))


@dataclasses.dataclass
class _Told:
    """An Event posted: its name and namespace, and how many times it has been told."""

    name: str
    namespace: str
    count: int
    first: str  # its firstTimestamp


class Correlator:
    """Which events repeat one already posted, and whether one may be posted now (client-go's correlator: the
    identical-event cache and the source+object spam filter, both least recently used, both bounded). Pure but
    for `clock`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, remembered: int = REMEMBERED,
                 burst: int = SPAM_BURST, refill: float = SPAM_REFILL) -> None:
        self.clock = clock
        self.remembered = remembered
        self.burst = burst
        self.refill = refill
        self._told: collections.OrderedDict[bytes, _Told] = collections.OrderedDict()
        self._tokens: collections.OrderedDict[bytes, tuple[float, float]] = collections.OrderedDict()

    @staticmethod
    def _remember(cache: collections.OrderedDict[bytes, _T], key: bytes, value: _T,
                  size: int) -> None:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > size:
            cache.popitem(last=False)

    def repeat(self, key: bytes) -> _Told | None:
        """The Event that `key` repeats, its count raised by this telling (None: a new one)."""
        told = self._told.get(key)
        if told is None:
            return None
        told.count += 1
        self._told.move_to_end(key)
        return told

    def posted(self, key: bytes, told: _Told) -> None:
        self._remember(self._told, key, told, self.remembered)

    def forget(self, key: bytes) -> None:
        self._told.pop(key, None)

    def allow(self, source: bytes) -> bool:
        """Whether `source` (a component, an object and a reason) may post a repeat now: a token bucket of `burst`
        tokens, one more every `refill` seconds. By reason too: a noisy repeat (a `ConnectionFailure` every few
        seconds) must not hold back another's (the same `UpdateFailed` after a recovery)."""
        now = self.clock()
        tokens, since = self._tokens.get(source, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - since) / self.refill)
        allowed = tokens >= 1.0
        self._remember(self._tokens, source, (tokens - 1.0 if allowed else tokens, now), self.remembered)
        return allowed


class Recorder:
    """Records events for one component (`stack-controller`, `workspace-controller`, ...)."""

    def __init__(self, client: kclient.Client, component: str, correlator: Correlator | None = None) -> None:
        self.client = client
        self.component = component
        self.correlator = correlator or Correlator()

    async def emit(self, obj: objects.Like, type_: str, reason: str, message: str) -> None:
        obj = objects.identity(obj)
        now = datetime.datetime.now(datetime.UTC)
        event = event_for(obj, type_, reason, message, self.component, now)
        involved = _object_parts(event, self.component)
        source = digest(*involved, reason)
        key = digest(*involved, type_, reason, event.get("message"))
        told = self.correlator.repeat(key)
        if told is not None and not self.correlator.allow(source):
            log.debug("not posting a repeat of event %s on %s yet: too many from %s about it", reason,
                      objects.key_of(obj), self.component)
            return
        try:
            if told is not None:
                try:
                    await self.client.patch(resources.EVENT, told.name, {
                        "count": told.count, "lastTimestamp": event["lastTimestamp"]}, told.namespace)
                    return
                except errors.NotFound:  # expired (the API server keeps events an hour): post it again
                    self.correlator.forget(key)
                    event["count"] = told.count
                    event["firstTimestamp"] = told.first
            meta = event["metadata"]
            await self.client.create(event)
            self.correlator.posted(key, _Told(meta["name"], meta["namespace"], int(event["count"]),
                                              str(event["firstTimestamp"])))
        except Exception as err:  # best effort by design
            log.warning("could not record event %s on %s: %s", reason, objects.key_of(obj), err)

    async def normal(self, obj: objects.Like, reason: str, message: str) -> None:
        await self.emit(obj, NORMAL, reason, message)

    async def warning(self, obj: objects.Like, reason: str, message: str) -> None:
        await self.emit(obj, WARNING, reason, message)
