"""The StackRollout executor: read the rollout and its namespace's Stacks, run the gates the plan asks for, write
the status, then patch the Stacks and post the events.

Why this order: the status (with each Stack's undo patch) is written before a Stack is patched, so an operator that
dies between the two never loses how to roll a Stack back; the plan sends a lost patch again (plan.py). Stacks are
listed from the API server, not from this shard's cache: a rollout may span Stacks of every shard
(pko.runtime.sharding), and a wave in progress is looked at every few seconds anyway.

Must never: patch a Stack before the status that records the change is stored; put a gate's response body in a
message; stop on a Stack that went away (the plan skips it).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pko.api import names
from pko.api import rollout as api
from pko.controllers.rollout import gates, plan
from pko.kube import client as kclient
from pko.kube import errors, events, objects, resources
from pko.runtime import sharding
from pko.runtime.controller import Result

log = logging.getLogger(__name__)

Observer = Callable[[objects.ObjectKey, api.StackRollout | None, Iterable[tuple[str, str]]], None]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass
class RolloutReconciler:
    client: kclient.Client  # reads and writes through the manager's caches
    live: kclient.Client  # lists Stacks of every shard
    recorder: events.Recorder
    http: gates.GateClient
    rollouts: Callable[[str], list[objects.Object]]  # this shard's StackRollouts of a namespace (the informer's store)
    #: the Stacks of a namespace from this operator's cache, when it sees every Stack (no sharding); None: listed
    cached_stacks: Callable[[str], list[objects.Object]] | None = None
    shard: sharding.Shard = sharding.EVERYTHING
    observe: Observer | None = None  # metrics: (key, rollout or None when gone, gate checks as (gate, result))
    clock: Callable[[], datetime.datetime] = _now
    #: Stacks whose last patch the API server refused for good, by rollout: told to the next pass
    refused: dict[objects.ObjectKey, dict[str, str]] = field(default_factory=dict)

    async def __call__(self, key: objects.ObjectKey) -> Result | None:
        found = await self.client.get_or_none(resources.STACK_ROLLOUT, key.name, key.namespace)
        if found is None or not self.shard.owns_labels((found.get("metadata") or {}).get("labels")):
            if self.observe is not None:
                self.observe(key, None, ())
            return None
        rollout = api.StackRollout.model_validate(found)
        if rollout.metadata.deletion_timestamp or rollout.spec is None:
            return None
        stacks = [plan.view(obj) for obj in await self._stacks(key.namespace)]
        now = self.clock()
        checks = await self._check(rollout, stacks, now)
        active = await self._active(key, stacks)
        result = plan.plan(rollout, stacks, active_rollouts=active, checks=checks, now=now,
                           refused=self.refused.pop(key, None))
        if result.status != rollout.status:
            await self.client.apply_status(
                objects.status_apply(api.API_VERSION, api.KIND, key, result.status.to_wire()),
                field_manager=names.FIELD_MANAGER_ROLLOUT)
        for patch in result.patches:
            if (why := await self._patch(found, patch)) is not None:
                self.refused.setdefault(key, {})[patch.name] = why
        for event in result.events:
            await self.recorder.emit(found, event.type, event.reason, event.message)
        if self.observe is not None:
            rollout.status = result.status
            self.observe(key, rollout, [(name, "passed" if c.healthy else "failed") for name, c in checks.items()])
        return Result(requeue_after=result.requeue_after) if result.requeue_after is not None else None

    async def _stacks(self, namespace: str) -> list[objects.Object]:
        if self.cached_stacks is not None:
            return self.cached_stacks(namespace)
        return (await self.live.list(resources.STACK, namespace)).items

    async def _check(self, rollout: api.StackRollout, stacks: list[plan.StackView],
                     now: datetime.datetime) -> dict[str, plan.GateCheck]:
        due = plan.due_gates(rollout, now)
        if not due:
            return {}
        moved = {s.name for s in (rollout.status.stacks if rollout.status else None) or []
                 if s.state == api.STACK_SUCCEEDED}
        at_revision = [s for s in stacks if s.name in moved]
        found: dict[str, plan.GateCheck] = {}
        for gate in due:
            headers: dict[str, str] | None = None
            if gate.headers_secret_ref is not None:
                secret = await self.live.get_or_none(resources.SECRET, gate.headers_secret_ref.name,
                                                     rollout.metadata.namespace)
                read = gates.headers_of(secret, gate.headers_secret_ref.name)
                if isinstance(read, plan.GateCheck):
                    found[gate.name] = read
                    continue
                headers = read
            found[gate.name] = await gates.check(gate, at_revision, self.http, headers)
        return found

    async def _active(self, key: objects.ObjectKey, stacks: list[plan.StackView]) -> set[str]:
        """The other StackRollouts of the namespace that have not ended (a claim by one that ended, or is gone,
        binds nothing)."""
        active, cached = set(), set()
        for obj in self.rollouts(key.namespace):
            if objects.name_of(obj) == key.name:
                continue
            cached.add(objects.name_of(obj))
            phase = (obj.get("status") or {}).get("phase")
            if phase not in api.TERMINAL and not (obj.get("metadata") or {}).get("deletionTimestamp"):
                active.add(objects.name_of(obj))
        # another shard's rollouts are not in this shard's cache: ask for the ones that claim Stacks here
        for owner in {s.rollout for s in stacks if s.rollout} - cached - {key.name}:
            other = await self.live.get_or_none(resources.STACK_ROLLOUT, owner, key.namespace)
            if other is not None and (other.get("status") or {}).get("phase") not in api.TERMINAL:
                active.add(owner)
        return active

    async def _patch(self, rollout: objects.Object, patch: plan.StackPatch) -> str | None:
        """Send one patch; the API server's message when it refused it for good (the plan then fails the Stack)."""
        namespace = objects.namespace_of(rollout)
        try:
            await self.live.patch(resources.STACK, patch.name, patch.patch, namespace)
        except errors.NotFound:
            log.info("Stack %s/%s is gone; the rollout skips it", namespace, patch.name)
        except errors.Conflict:
            # the Stack changed since it was read (or another rollout claimed it): the next pass reads it again
            log.info("Stack %s/%s changed meanwhile; the rollout looks again", namespace, patch.name)
        except (errors.Invalid, errors.BadRequest, errors.Forbidden) as err:
            message = err.message or str(err)
            log.warning("the API server refused the rollout's change of Stack %s/%s: %s", namespace, patch.name,
                        message)
            await self.recorder.warning(rollout, "RolloutPatchFailed", f"could not change Stack {patch.name}: "
                                                                       f"{message}")
            return message
        except errors.ApiError as err:  # passing (a timeout, the API server busy): the next pass sends it again
            log.warning("could not patch Stack %s/%s: %s", namespace, patch.name, err)
        return None
