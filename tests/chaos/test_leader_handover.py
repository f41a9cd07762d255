"""Two `pko operator` processes with leader election; the leader SIGKILLed while its Updates are in flight. The
other takes the Lease and picks up every Stack: each converges at its new generation, no generation's `up`
succeeds twice (the new leader never runs a second `up` next to one still running), no Update is left incomplete,
no backend is locked and nothing of the dead leader's is left running."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pko.controllers.settings import DEFAULT_NAMESPACE
from pko.kube import client as kclient
from pko.kube import resources
from pko.runtime.leaderelection import DEFAULT_LEASE_NAME
from pko.testing.waiting import condition, eventually

from . import chaos

# Short enough that the handover happens within the test, long enough for two busy processes on two cores.
ELECTION = ["--leader-elect", "--leader-election-lease-duration", "6s", "--leader-election-renew-deadline", "4s",
            "--leader-election-retry-period", "1s"]


async def _holder(kc: kclient.Client) -> str:
    lease = await kc.get_or_none(resources.LEASE, DEFAULT_LEASE_NAME, DEFAULT_NAMESPACE)
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


async def test_the_new_leader_picks_up_in_flight_updates(
    ckc: kclient.Client, cns: str, tmp_path: Path, operators: Callable[..., chaos.OperatorProcess],
) -> None:
    run: str = operators.run  # type: ignore[attr-defined]
    first, second = operators(*ELECTION, name="first"), operators(*ELECTION, name="second")
    first.start()
    await first.ready()
    await eventually(lambda: _held(ckc), "the first operator to take the Lease", 60)
    second.start()
    await second.ready()
    fleet = await chaos.create_fleet(ckc, cns, tmp_path, 2)
    await chaos.wait_converged(ckc, fleet, 0, timeout=300, diagnostics=lambda: first.tail() + second.tail())
    leader, follower = (first, second) if chaos.descendants(run, first.pid) else (second, first)
    assert chaos.descendants(run, leader.pid)
    assert not chaos.descendants(run, follower.pid), "only the leader runs agents"
    holder = await _holder(ckc)

    await chaos.start_round(ckc, fleet, 1)

    async def in_flight() -> bool:
        return bool(await chaos.in_flight(ckc, cns))

    await eventually(in_flight, "Updates in flight", 120, interval=0.05)
    leader.kill()
    assert await chaos.wait_no_orphans(run, [follower.pid]) == []

    async def handed_over() -> bool:
        return (await _holder(ckc)) not in ("", holder)

    await eventually(handed_over, "the follower to take the Lease", 60, interval=0.2)
    await chaos.wait_converged(ckc, fleet, 1, timeout=300, diagnostics=follower.tail)
    left = [u["metadata"]["name"] for u in (await ckc.list(resources.UPDATE, cns)).items
            if condition(u, "Complete").get("status") != "True"]
    assert left == [], f"Updates never finished: {left}"
    tally = chaos.Tally(rounds=1)
    chaos.count_backends(fleet, tally)
    assert tally.duplicated == 0, "\n".join(tally.details)
    assert tally.locked == 0, "\n".join(tally.details)
    assert follower.alive()
    assert await follower.terminate() == 0, follower.tail()


async def _held(kc: kclient.Client) -> bool:
    return bool(await _holder(kc))
