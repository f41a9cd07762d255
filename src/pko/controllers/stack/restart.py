"""After the operator starts: the Stacks it finds settled are verified spread over a window, not all at once — pure.

Why: a (re)started operator lists every Stack and reconciles each at once. For a settled Stack (Ready at its current
generation and request, nothing running) that means listing its branch's refs again (`git ls-remote`), and every
piece of time-driven work that fell due while the operator was down (resyncs, retries, drift checks) starts in the
same second: a fleet of a thousand Stacks becomes a thousand git calls and a wave of updates, the restart storm
tofu-controller had until it spread its restarts. So the first look at each settled Stack waits a delay of its own,
fixed by its name (the same at every restart, spread evenly over the window), and the window grows with the fleet:
:data:`PER_STACK` seconds a Stack, at most :data:`MAX_WINDOW` — a few Stacks are looked at within a second, a
thousand over the minute in which a branch poll would have looked at them anyway. A Stack that is not settled (new,
changed, failed, running, being deleted) is looked at once. Until its delay is over a settled Stack stays
delayed whatever wakes it (its Workspace's status changing as the new process reconnects to the agents, a resync of
the informers): :class:`FirstLooks` keeps, for the process, which Stacks have had their first look.
"""

from __future__ import annotations

import hashlib

from pko.api import conditions
from pko.api import stack as stack_api
from pko.controllers.stack import sync

#: Seconds of spread a Stack adds to the window, and the window's bound.
PER_STACK = 0.05
MAX_WINDOW = 60.0


def settled(stack: stack_api.Stack) -> bool:
    """Ready at its current generation and request, with nothing running and nothing to finalize."""
    status = stack.status or stack_api.StackStatus()
    return (stack.metadata.deletion_timestamp is None
            and status.observed_generation == stack.metadata.generation
            and (status.observed_reconcile_request or "") == sync.reconcile_request(stack)
            and status.current_update is None
            and (status.drift is None or status.drift.current_check is None)
            and conditions.is_true(status.conditions, conditions.READY))


def window(fleet: int, per_stack: float = PER_STACK) -> float:
    """The spread of a fleet of `fleet` Stacks' first looks."""
    return min(MAX_WINDOW, max(fleet, 0) * per_stack)


def delay(namespace: str, name: str, fleet: int, per_stack: float = PER_STACK) -> float:
    """Seconds before the first look at the settled Stack `namespace/name`, in a fleet of `fleet`."""
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).digest()
    return window(fleet, per_stack) * int.from_bytes(digest[:8], "big") / 2**64


class FirstLooks:
    """The first looks of one process: whether a Stack must still wait for its delay, given the process's clock."""

    def __init__(self, per_stack: float = PER_STACK) -> None:
        self.per_stack = per_stack
        self._start: float | None = None  # the time of the process's first reconcile
        self._looked: set[tuple[str, str]] = set()  # (namespace, name) of the Stacks looked at

    def wait(self, stack: stack_api.Stack, fleet: int, now: float) -> float | None:
        """Seconds `stack` must still wait before its first look, or None to look now; once None is answered for a
        Stack it is always None (until :meth:`forget`)."""
        namespace, name = stack.metadata.namespace or "", stack.metadata.name or ""
        key = (namespace, name)
        if self._start is None:
            self._start = now
        if key in self._looked:
            return None
        elapsed = now - self._start
        if elapsed < window(fleet, self.per_stack) and settled(stack):
            left = delay(namespace, name, fleet, self.per_stack) - elapsed
            if left > 0.5:
                return left  # not looked at yet: asked again before its time (woken by another event), it still waits
        self._looked.add(key)  # the restart is over, or the Stack has work, or its time has come
        return None

    def forget(self, namespace: str, name: str) -> None:
        """The Stack is gone (or left this shard): seen again, it is new."""
        self._looked.discard((namespace, name))
