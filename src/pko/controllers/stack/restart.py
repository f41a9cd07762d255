"""After the operator starts: the Stacks it finds settled are verified spread over a window, not all at once — pure.

Why: a (re)started operator lists every Stack and reconciles each at once. For a settled Stack (Ready at its current
generation and request, nothing running) that means listing its branch's refs again (`git ls-remote`), and every
piece of time-driven work that fell due while the operator was down (resyncs, retries, drift checks) starts in the
same second: a fleet of a thousand Stacks becomes a thousand git calls and a wave of updates, the restart storm
tofu-controller had until it spread its restarts. So the first look at each settled Stack waits a delay of its own,
fixed by its name (the same at every restart, spread evenly over the window), and the window grows with the fleet:
:data:`PER_STACK` seconds a Stack, at most :data:`MAX_WINDOW` — a few Stacks are looked at within a second, a
thousand over the minute in which a branch poll would have looked at them anyway. A Stack that is not settled (new,
changed, failed, running, being deleted) is looked at once, and any Stack only once per process start is delayed.
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
