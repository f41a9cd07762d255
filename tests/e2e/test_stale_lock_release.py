"""A backend lock whose holder is gone is released, with an event and a status line; the lock of a live operation
never is (PKO#736, docs/reliability.md).

End to end with the real Pulumi CLI on a `file://` backend and agents as local processes (their host is this one): a
lock file is left in the Stack's backend as a CLI killed mid-update leaves it. Held by a process that is gone, the
agent removes it before the next update, which succeeds; the Update and the Stack get a `StaleLockReleased`
warning, and the line is in the Update's `status.message` and the Stack's `status.lastUpdate.message`. Held by a
live `pulumi` process, the lock stays and the update fails on it; once that process is gone, the Stack's retry
releases it and succeeds."""

from __future__ import annotations

import json
import socket
import subprocess
import uuid
from pathlib import Path

import stack_e2e as e2e

from pko.kube import client as kclient
from pko.kube import resources
from pko.protocol import notices
from pko.testing import operator
from pko.testing.waiting import wait_for

PASSPHRASE = {"type": "Literal", "literal": {"value": "locks"}}


def _plant(backend: Path, pid: int) -> Path:
    """A lock of the Stack's stack held by `pid` on this host, where the CLI keeps it (per project)."""
    (project,) = (backend / ".pulumi" / "stacks").iterdir()
    directory = backend / ".pulumi" / "locks" / "organization" / project.name / "dev"
    directory.mkdir(parents=True, exist_ok=True)
    lock = directory / f"{uuid.uuid4()}.json"
    lock.write_text(json.dumps({"pid": pid, "username": "someone", "hostname": socket.gethostname(),
                                "timestamp": "2026-11-27T00:00:00Z"}))
    return lock


def _gone_pid() -> int:
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


async def test_a_dead_holders_lock_goes_and_a_live_ones_stays(
    kc: kclient.Client, namespace: str, stack_operator: operator.Operator, tmp_path: Path,
) -> None:
    backend = tmp_path / "state"
    backend.mkdir()
    await kc.create(resources.PROGRAM.new("locks", namespace, program={"outputs": {"answer": 42}}))
    await kc.create(resources.STACK.new("locks", namespace, spec={
        "stack": "dev", "programRef": {"name": "locks"}, "backend": f"file://{backend}",
        "envRefs": {"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE}}))
    await wait_for(kc, resources.STACK, "locks", namespace, e2e.is_ready)

    # A live `pulumi` process holds a lock: it stays, and the update fails on it.
    holder = subprocess.Popen(["pulumi", "600"], executable="sleep")  # noqa: ASYNC220 (argv[0] is `pulumi`)
    try:
        live = _plant(backend, holder.pid)
        await e2e.request_reconcile(kc, "locks", namespace, "while-held")
        failed = await wait_for(kc, resources.STACK, "locks", namespace, lambda o: (
            e2e.last_update(o).get("reconcileRequest") == "while-held"
            and e2e.last_update(o).get("state") == "failed"), timeout=240)
        assert live.exists(), "the lock of a live process was released"
        assert "locked" in e2e.last_update(failed).get("message", "")
        assert not [e for e in await e2e.events_of(kc, "locks", namespace) if e["reason"] == "StaleLockReleased"]
    finally:
        holder.kill()
        holder.wait()

    # Its holder gone, the Stack's retry releases it and succeeds, and says so.
    ready = await wait_for(kc, resources.STACK, "locks", namespace, lambda o: (
        e2e.is_ready(o) and e2e.last_update(o).get("reconcileRequest") == "while-held"), timeout=240)
    assert not live.exists()
    assert f"{notices.STALE_LOCK_RELEASED} {live.name}: its holder, pid {holder.pid}" in (
        e2e.last_update(ready).get("message") or "")
    stack_events = await e2e.events_with(kc, "locks", namespace, "StaleLockReleased")
    assert live.name in stack_events[0]["message"]
    update = await kc.get(resources.UPDATE, e2e.last_update(ready)["name"], namespace)
    assert live.name in update["status"]["message"]
    update_events = await e2e.events_with(kc, update["metadata"]["name"], namespace, "StaleLockReleased", kind="Update")
    assert str(holder.pid) in update_events[0]["message"]

    # A lock a SIGKILLed CLI left (its process is gone): released before the next update, which succeeds.
    dead = _plant(backend, _gone_pid())
    await e2e.request_reconcile(kc, "locks", namespace, "after-a-kill")
    again = await wait_for(kc, resources.STACK, "locks", namespace, lambda o: (
        e2e.is_ready(o) and e2e.last_update(o).get("reconcileRequest") == "after-a-kill"), timeout=240)
    assert not dead.exists()
    assert dead.name in (e2e.last_update(again).get("message") or "")
    assert again["status"]["outputs"] == {"answer": 42}
