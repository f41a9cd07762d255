"""`pko operator` SIGKILLed at a random moment, round after round, while a fleet of Stacks has updates in flight,
then restarted: every Stack still converges to Ready with the right outputs, no generation's `up` succeeds twice,
no backend is left locked, no finalizer is lost (each deleted Stack's stack was destroyed first) and no process
of the operator's outlives it.

The kill points come in an order drawn from a seeded generator (the seed is printed; ``PKO_CHAOS_SEED`` replays a
run), each point once before any repeats: right after the new generation is written (source fetch, agent start),
during `pulumi install` (an operator's new agents install the program's dependencies before their first Update: the
round kills right after the change, restarts the operator, and kills it again while its agents' `pulumi install`
processes run), while `up`s run, right after an Update completed (its status and the Stack's being written), and —
after the last round — while the finalizers' `destroy` runs.

`make test` runs one round per kill point over four Stacks (two failed once in four runs: fewer Stacks give the
``install`` kill point a shorter window to land in); ``make soak`` (``PKO_SOAK=1``) runs 20 rounds over 10 and
ends with the tally line ``soak: rounds=R updates=U lost=0 duplicated=0 locked=0 orphaned=0``.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Callable
from pathlib import Path

from pko.agent import yamlinstall
from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import faults
from pko.testing.waiting import condition, eventually

from . import chaos

SOAK = bool(os.environ.get("PKO_SOAK"))
KILL_POINTS = ("fetch", "install", "up", "status")
ROUNDS = 20 if SOAK else len(KILL_POINTS)
STACKS = 10 if SOAK else 4


def installing(run: str) -> list[int]:
    """This run's `pulumi install` processes (the agents' CLI installing a program's dependencies)."""
    return [pid for pid in chaos.marked(run) if faults.is_pulumi_install(pid)]


async def _kill_point(kc: kclient.Client, namespace: str, point: str, rng: random.Random) -> str:
    """Wait for the moment `point` of the round (never for a fixed time: for what the cluster shows), plus a
    random jitter; returns what was seen, for the log."""
    if point == "fetch":
        await asyncio.sleep(rng.uniform(0, 0.5))
        return "after the new generation"
    if point == "up":
        await eventually(lambda: _any_in_flight(kc, namespace), "an Update in flight", 120, interval=0.05)
        await asyncio.sleep(rng.uniform(0, 1.5))
        return "with Updates in flight"
    seen = {objects_name(u) for u in (await kc.list(resources.UPDATE, namespace)).items}

    async def one_completed() -> bool:
        for update in (await kc.list(resources.UPDATE, namespace)).items:
            if objects_name(update) not in seen and condition(update, "Complete").get("status") == "True":
                return True
        return False

    await eventually(one_completed, "an Update of this round to complete", 180, interval=0.05)
    return "right after an Update completed"


def objects_name(obj: dict[str, object]) -> str:
    return str(obj["metadata"]["name"])  # type: ignore[index]


async def _any_in_flight(kc: kclient.Client, namespace: str) -> bool:
    return bool(await chaos.in_flight(kc, namespace))


async def test_operator_sigkill_rounds(ckc: kclient.Client, cns: str, tmp_path: Path, pulumi_env: dict[str, str],
                                       operators: Callable[..., chaos.OperatorProcess]) -> None:
    seed = int(os.environ.get("PKO_CHAOS_SEED") or random.SystemRandom().randrange(1 << 30))
    print(f"chaos seed: {seed} (PKO_CHAOS_SEED={seed} replays the kill points)")
    rng = random.Random(seed)
    run: str = operators.run  # type: ignore[attr-defined]
    op = operators()
    op.start()
    await op.ready()
    fleet = await chaos.create_fleet(ckc, cns, tmp_path, STACKS)
    tally = chaos.Tally()
    diagnostics = op.tail
    await chaos.wait_converged(ckc, fleet, 0, timeout=300, diagnostics=diagnostics)

    for round_, point in enumerate(faults.schedule(rng, KILL_POINTS, ROUNDS), start=1):
        await chaos.start_round(ckc, fleet, round_)
        if point == "install":
            op.kill()
            tally.orphaned += len(await chaos.wait_no_orphans(run, []))
            # the fleet's programs were installed into this PULUMI_HOME before, and a YAML program's agent skips an
            # install that would find nothing to do (pko.agent.yamlinstall): forget that, so the agents install
            (yamlinstall.plugins_dir(pulumi_env) / yamlinstall.NOTE).unlink(missing_ok=True)
            op.start()
            await eventually(lambda: bool(installing(run)), "a `pulumi install` of the restarted operator's agents",
                             120, interval=0.02)
            seen = "during `pulumi install` (of the agents of an operator restarted right after the change)"
        else:
            seen = await _kill_point(ckc, cns, point, rng)
        op.kill()
        print(f"round {round_}: SIGKILL {seen} ({point})")
        left = await chaos.wait_no_orphans(run, [])
        tally.orphaned += len(left)
        assert not left, f"round {round_}: processes outlived the SIGKILLed operator:\n{chaos.describe(left)}"
        op.start()
        await op.ready()
        await chaos.wait_converged(ckc, fleet, round_, timeout=300, diagnostics=diagnostics)
        tally.rounds += 1

    # Deletion: the finalizer's `destroy` in flight when the operator dies; after the restart every Stack goes,
    # and only after its stack was destroyed.
    await chaos.delete_all(ckc, fleet)
    await eventually(lambda: _any_in_flight(ckc, cns), "a destroy in flight", 120, interval=0.05)
    await asyncio.sleep(rng.uniform(0, 1.0))
    op.kill()
    print("final: SIGKILL during the finalizers' destroy")
    left = await chaos.wait_no_orphans(run, [])
    tally.orphaned += len(left)
    op.start()
    await op.ready()

    async def all_gone() -> bool:
        return not [s for s in (await ckc.list(resources.STACK, cns)).items]

    await eventually(all_gone, "every Stack deleted", 300, interval=0.5)
    tally.lost += sum(1 for m in fleet if not m.destroyed())
    tally.details += [f"{m.name}: deleted without a destroy" for m in fleet if not m.destroyed()]
    assert await op.terminate() == 0, op.tail()
    left = await chaos.wait_no_orphans(run, [])
    tally.orphaned += len(left)

    chaos.count_backends(fleet, tally)
    tally.record()
    assert tally.updates >= STACKS * (ROUNDS + 1)
    assert tally.clean(), "\n".join(tally.details)
