"""The Lease I/O around :mod:`pko.runtime.leaderelection`: campaign, keep renewing, release.

:meth:`LeaderElector.campaign` returns once this process holds the lease; :meth:`LeaderElector.hold` returns
when it lost it (could not renew within the renew deadline, or someone else holds it); :meth:`release` hands it
back. Writes use optimistic concurrency (``resourceVersion``): of two candidates writing the same record, one
gets ``409 Conflict`` and keeps waiting.

This module must never decide anything the pure module can decide, and never reconcile: the manager starts and
stops controllers around these calls.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
import socket
import time
import uuid
from typing import Any

from pko import kube
from pko.kube import resources
from pko.runtime import leaderelection as le

log = logging.getLogger(__name__)


def default_identity() -> str:
    """``<hostname>_<uuid>``, as controller-runtime names its candidates."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


class LeaderElector:
    def __init__(
        self,
        client: kube.Client,
        namespace: str,
        *,
        name: str = le.DEFAULT_LEASE_NAME,
        identity: str | None = None,
        timing: le.Timing | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.timing = timing or le.Timing()
        self.is_leader = False
        self._record: le.Record | None = None
        self._observed_at = 0.0
        self._lease: dict[str, Any] | None = None
        self._renewed_at = 0.0

    def __repr__(self) -> str:
        return f"<LeaderElector {self.namespace}/{self.name} as {self.identity}>"

    async def try_acquire_or_renew(self) -> bool:
        """One attempt: True when we hold the lease afterwards."""
        lease = await self.client.get_or_none(resources.LEASE, self.name, self.namespace)
        now = time.monotonic()
        record = le.record_of(lease) if lease is not None else None
        self._observed_at = le.observed(self._record, self._observed_at, record, now)
        self._record, self._lease = record, lease
        action = le.decide(record, self.identity, self._observed_at, now)
        if action is le.Action.WAIT:
            self.is_leader = False
            return False
        wanted = le.next_record(record, self.identity, action, self.timing.lease_duration, _wall_clock())
        try:
            if lease is None:
                body = resources.LEASE.new(self.name, self.namespace, spec=le.lease_spec(wanted))
                written = await self.client.create(body)
            else:
                body = {**lease, "spec": {**(lease.get("spec") or {}), **le.lease_spec(wanted)}}
                written = await self.client.replace(body)
        except kube.Conflict:  # someone else wrote first (also AlreadyExists)
            self.is_leader = False
            return False
        self._lease, self._record, self._observed_at = written, wanted, time.monotonic()
        if action is le.Action.ACQUIRE and not self.is_leader:
            log.info("%r: acquired the lease", self)
        self.is_leader = True
        self._renewed_at = now
        return True

    async def campaign(self) -> None:
        """Return once this process is the leader (retrying every retry period)."""
        while True:
            try:
                if await self.try_acquire_or_renew():
                    return
            except Exception as err:  # API down, timeouts: keep trying
                log.warning("%r: cannot acquire the lease: %s", self, err)
            # Jittered like client-go, so candidates started together do not keep colliding.
            await asyncio.sleep(self.timing.retry_period * random.uniform(1.0, 1.2))

    async def hold(self) -> None:
        """Renew every retry period; return when leadership is lost (then ``is_leader`` is False)."""
        while True:
            await asyncio.sleep(self.timing.retry_period)
            while True:
                remaining = self.timing.renew_deadline - (time.monotonic() - self._renewed_at)
                if remaining <= 0:
                    break
                try:
                    async with asyncio.timeout(remaining):
                        if await self.try_acquire_or_renew():
                            break
                        if self._record is not None and self._record.holder not in ("", self.identity):
                            break  # somebody else holds it now
                except TimeoutError:
                    break
                except Exception as err:
                    log.warning("%r: cannot renew the lease: %s", self, err)
                await asyncio.sleep(min(self.timing.retry_period / 4, 1.0))
            if le.lost(self._renewed_at, time.monotonic(), self.timing) or not self.is_leader:
                log.warning("%r: lost the lease", self)
                self.is_leader = False
                return

    async def release(self) -> None:
        """Step down: clear the holder so a successor need not wait for expiry (only if we still hold it)."""
        if not self.is_leader or self._lease is None or self._record is None:
            self.is_leader = False
            return
        self.is_leader = False
        body = {**self._lease, "spec": {**(self._lease.get("spec") or {}),
                                        **le.lease_spec(le.released(self._record, _wall_clock()))}}
        try:
            await self.client.replace(body)
            log.info("%r: released the lease", self)
        except Exception as err:  # a lost race or a dead API server: the lease expires on its own
            log.warning("%r: cannot release the lease: %s", self, err)


def _wall_clock() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
