"""Wiring of the StackRollout controller into a manager: its watches and its metrics.

A rollout is reconciled when it changes (spec or the promote annotation) and when a Stack of its namespace changes
status or spec (a wave in progress also looks every few seconds: Stacks of other shards send no event here). The
StackRollout informer is optional: where pko's StackRollout CRD is not installed (only the Go operator's CRDs), the
operator runs as before and looks for the kind again every five minutes.

Metrics: ``pko_stackrollout_phase{namespace,name,phase}`` (1 for the current phase),
``pko_stackrollout_wave{namespace,name}`` (the wave in progress, from 1), ``pko_stackrollout_stacks{namespace,name,
state}`` and ``pko_stackrollout_gate_checks_total{namespace,name,gate,result}``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

from pko.api import names
from pko.api import rollout as api
from pko.controllers.rollout import gates
from pko.controllers.rollout import reconciler as rollout_reconciler
from pko.controllers.settings import Settings
from pko.kube import client as kclient
from pko.kube import events, objects, resources
from pko.runtime import controller as ctl
from pko.runtime import handlers, manager, store

PHASES = (api.PENDING, api.PROGRESSING, api.BAKING, api.PAUSED, api.BLOCKED, api.ROLLING_BACK, api.ROLLED_BACK,
          api.COMPLETED)
STACK_STATES = (api.STACK_PENDING, api.STACK_UPDATING, api.STACK_SUCCEEDED, api.STACK_FAILED, api.STACK_SKIPPED,
                api.STACK_ROLLING_BACK, api.STACK_ROLLED_BACK, api.STACK_ROLLBACK_FAILED)


class RolloutMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.phase = Gauge("pko_stackrollout_phase", "1 for the phase each StackRollout is in",
                           ["namespace", "name", "phase"], registry=registry)
        self.wave = Gauge("pko_stackrollout_wave", "The wave a StackRollout is at (from 1)", ["namespace", "name"],
                          registry=registry)
        self.stacks = Gauge("pko_stackrollout_stacks", "Stacks of a StackRollout by state",
                            ["namespace", "name", "state"], registry=registry)
        self.checks = Counter("pko_stackrollout_gate_checks_total", "Health gate checks of StackRollouts by result",
                              ["namespace", "name", "gate", "result"], registry=registry)

    def observe(self, key: objects.ObjectKey, rollout: api.StackRollout | None,
                checks: Iterable[tuple[str, str]]) -> None:
        if rollout is None:
            self.forget(key)
            return
        status = rollout.status or api.StackRolloutStatus()
        for phase in PHASES:
            self.phase.labels(key.namespace, key.name, phase).set(1 if status.phase == phase else 0)
        self.wave.labels(key.namespace, key.name).set((status.current_wave or 0) + (1 if status.waves else 0))
        for state in STACK_STATES:
            self.stacks.labels(key.namespace, key.name, state).set(
                sum(1 for s in status.stacks or [] if s.state == state))
        for gate, result in checks:
            self.checks.labels(key.namespace, key.name, gate, result).inc()

    def forget(self, key: objects.ObjectKey) -> None:
        for gauge, values in ((self.phase, PHASES), (self.stacks, STACK_STATES)):
            for value in values:
                with contextlib.suppress(KeyError):
                    gauge.remove(key.namespace, key.name, value)
        with contextlib.suppress(KeyError):
            self.wave.remove(key.namespace, key.name)


def _promote(obj: objects.Object) -> str:
    return objects.annotations_of(obj).get(names.ANNOTATION_ROLLOUT_PROMOTE, "")


def rollout_predicate(event: store.Event) -> bool:
    """A new, changed (spec) or deleted rollout, or a new promote request."""
    if event.type != "MODIFIED" or event.old is None:
        return True
    return handlers.generation_changed(event) or _promote(event.object) != _promote(event.old)


def stack_moved(event: store.Event) -> bool:
    """A Stack's spec or status changed (its rollout may go on), or it went."""
    if event.type != "MODIFIED" or event.old is None:
        return True
    return bool(event.object.get("status") != event.old.get("status")
                or objects.generation_of(event.object) != objects.generation_of(event.old))


@dataclass
class RolloutController:
    reconciler: rollout_reconciler.RolloutReconciler
    controller: ctl.Controller
    metrics: RolloutMetrics

    async def close(self) -> None:
        await self.reconciler.http.aclose()


def setup(mgr: manager.Manager, client: kclient.Client, live: kclient.Client, settings: Settings
          ) -> RolloutController:
    """Register the StackRollout controller on `mgr` (`client` reads through the caches; `live` does not)."""
    rollouts = mgr.informer(resources.STACK_ROLLOUT)
    rollouts.optional = True
    stacks = mgr.informer(resources.STACK)
    metrics = RolloutMetrics(mgr.registry)
    reconciler = rollout_reconciler.RolloutReconciler(
        client=client, live=live, recorder=events.Recorder(client, names.ROLLOUT_CONTROLLER),
        http=gates.GateClient({"User-Agent": f"pko/{settings.version}"}),
        rollouts=rollouts.store.list, shard=settings.shard, observe=metrics.observe)
    if settings.shard.everything:  # this operator's cache holds every Stack: no list per pass
        reconciler.cached_stacks = stacks.store.list
    controller = mgr.controller(names.ROLLOUT_CONTROLLER, reconciler, workers=max(1, min(settings.workers, 4)))
    controller.watch(rollouts, predicate=rollout_predicate)

    def covering(obj: objects.Object) -> list[objects.ObjectKey]:
        return [objects.key_of(r) for r in rollouts.store.list(objects.namespace_of(obj))
                if (r.get("status") or {}).get("phase") not in api.TERMINAL]

    controller.watch(stacks, handlers.for_mapping(covering), stack_moved)
    return RolloutController(reconciler, controller, metrics)
