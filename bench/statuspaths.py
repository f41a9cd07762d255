"""The paths a fleet's Stacks and Workspaces took through their statuses, and how many took each.

Why: the audit log says how many status writes a Stack cost (`patch workspaces/status 1180`), not which; what a
write is for decides whether it can go. Following every Stack and Workspace of a 200-Stack run through a watch,
each status write's reason in order, showed that a Workspace went ``Queued``, ``Installing``, ``Initializing``,
``Succeeded``, ``Sleeping``, and that two of those brought a write of its Stack too (docs/performance.md, "Fewer
writes a Stack"). `python -m bench fleet --runtime local --status-paths` prints the commonest paths.

:class:`Paths` is pure (it is given the objects the watch saw); :func:`follow` is the watch.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from typing import Any

from pko.kube import client as kclient
from pko.kube import errors, objects, resources

#: The kinds followed, by the name a path is printed under.
KINDS = {"Stack": resources.STACK, "Workspace": resources.WORKSPACE}


def step(kind: str, obj: objects.Object) -> str:
    """What a status says, in a word: a Workspace its Ready reason; a Stack its Reconciling reason while it
    reconciles, else its Ready reason ("-" when there is none)."""
    if kind == "Stack" and objects.condition_true(obj, "Reconciling"):
        return str(objects.condition(obj, "Reconciling").get("reason") or "-")
    return str(objects.condition(obj, "Ready").get("reason") or "-")


class Paths:
    """Each followed object's status writes, in order."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, objects.ObjectKey], Any] = {}
        self._steps: dict[tuple[str, objects.ObjectKey], list[str]] = {}

    def add(self, kind: str, obj: objects.Object) -> None:
        """An object as a watch saw it: a step of its path when its status changed (a write of its status)."""
        key = (kind, objects.key_of(obj))
        status = obj.get("status") or {}
        seen = key in self._last
        if (seen and self._last[key] == status) or (not seen and not status):
            self._last[key] = status
            return
        self._last[key] = status
        self._steps.setdefault(key, []).append(step(kind, obj))

    def writes(self, kind: str) -> int:
        """Status writes seen of `kind`."""
        return sum(len(steps) for (k, _), steps in self._steps.items() if k == kind)

    def most_common(self, kind: str, n: int = 4) -> list[tuple[str, int]]:
        """The `n` commonest paths of `kind` ("Queued x2 → Succeeded → Sleeping"), with how many took each."""
        counted = collections.Counter(render(steps) for (k, _), steps in self._steps.items() if k == kind)
        return counted.most_common(n)


def render(steps: list[str]) -> str:
    """Steps with repeats folded: ``["Queued", "Queued", "Succeeded"]`` → ``"Queued x2 → Succeeded"``."""
    folded = ((name, len(list(group))) for name, group in itertools.groupby(steps))
    return " → ".join(name if times == 1 else f"{name} x{times}" for name, times in folded)


async def follow(kc: kclient.Client, namespace: str, kind: str, since: str, paths: Paths) -> None:
    """Watch `kind` in `namespace` from resourceVersion `since` until cancelled, adding what it sees to `paths`
    (the watch is opened again while the API server's cache of a kind is still starting)."""
    while True:
        try:
            async for event in kc.watch(KINDS[kind], namespace, resource_version=since):
                if event.type in ("ADDED", "MODIFIED"):
                    paths.add(kind, event.object)
                if event.resource_version:
                    since = event.resource_version
        except errors.TooManyRequests:
            await asyncio.sleep(0.2)
