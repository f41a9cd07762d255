"""`StackUpdateDetected` once per update the operator decides on, not once per look at the Stack — pure.

Why: the reference emits the event at every reconcile that finds the Stack out of sync, and a Stack is reconciled
many times between that finding and its Update: while its Workspace is created, starts, initialises and, with a
bounded pool (`--max-active-workspaces`), waits in the queue, each change of the Workspace's status wakes it. A fleet
of 1,000 Stacks in a pool of 20 created ten events a Stack, most of them this one with the same words, each a
request the API server stores and every event watcher decodes. `kubectl describe` showed one line "(x6)" in the
reference, where client-go folds identical events into a count; here it shows one.

What is "the same update": the same Stack object (its uid: a Stack deleted and made again is a new one), the same
last finished Update (a retry after a failure is a new decision even when its words repeat) and the same message
(a new generation, commit or request changes it). Forgotten when the Stack is gone; a restarted operator announces
each pending update once more.
"""

from __future__ import annotations

from pko.api import stack as stack_api
from pko.kube import objects


class Announced:
    """The update each Stack was last announced for, in this process."""

    def __init__(self) -> None:
        self._said: dict[objects.ObjectKey, tuple[str, str, str]] = {}

    def first(self, key: objects.ObjectKey, stack: stack_api.Stack, status: stack_api.StackStatus,
              message: str) -> bool:
        """Whether `message` is news for `stack` (then it is remembered as said)."""
        last = status.last_update
        said = (stack.metadata.uid or "", (last.name or "") if last is not None else "", message)
        if self._said.get(key) == said:
            return False
        self._said[key] = said
        return True

    def forget(self, key: objects.ObjectKey) -> None:
        self._said.pop(key, None)
