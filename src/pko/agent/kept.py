"""An `up` that outlives its caller (pko addition to the protocol: `UpRequest.operation_id`, `OperationControl`).

Why: to an agent, a caller that goes away — an operator SIGKILLed or OOM-killed, a leader replaced in an upgrade,
a connection lost — looks exactly like a call cancelled on purpose, and the reference agent then interrupts the
CLI. A long `up` (hours, PKO#1293) is lost each time and runs again from its start. Asked to keep it, the agent
runs the operation in a task of its own and callers *follow* it: the messages kept so far, the rest as they come,
then its ending (the last message, or the error it failed with). A follower that goes away only stops following.
Only :meth:`Kept.cancel` (the operator's deliberate stop: an idle timeout, a deadline), the agent's own shutdown, or
nobody following it for `abandon_after` seconds interrupts the operation: a restarted operator follows it again
within seconds to minutes, while one that gave up on it (its Update aborted) never will, and an `up` nobody waits
for must not hold the workspace for ever — a hung one would never end.

Must never: lose the ending, let a follower's cancellation reach the operation, or hold more than `limit` messages
(the latest are kept, and the last one — the result — always is: a long `up`'s memory stays bounded), nor more
than the last few once it is over.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import logging
from collections.abc import AsyncIterator
from typing import Generic, TypeVar

log = logging.getLogger("pko.agent.kept")

Message = TypeVar("Message")

KEPT_MESSAGES = 2000  # an event is a few hundred bytes to a few kB; a follower that comes late gets the latest
#: Once the operation is over, a follower needs its ending and the engine's summary event just before it (the
#: resource changes): the rest is dropped, so an agent at rest does not hold a long `up`'s events until the next one.
KEPT_AFTER_END = 4
#: How long a running operation may go unfollowed before it is cancelled (the agent's ``PKO_KEPT_UNFOLLOWED_SECONDS``):
#: longer than a restarted operator takes to resume it (it gives up after 5 minutes: RESUME_WINDOW).
ABANDON_AFTER = 900.0


class Cancelled(Exception):
    """The ending of an operation stopped by :meth:`Kept.cancel`."""


class Kept(Generic[Message]):
    """One operation running under `operation_id`, fed by `source` until it ends."""

    def __init__(self, operation_id: str, source: AsyncIterator[Message], limit: int = KEPT_MESSAGES,
                 abandon_after: float = ABANDON_AFTER) -> None:
        self.operation_id = operation_id
        self.abandon_after = abandon_after
        self._followers = 0
        self._abandon: asyncio.TimerHandle | None = None
        self.started = datetime.datetime.now(datetime.UTC)
        self._messages: collections.deque[tuple[int, Message]] = collections.deque(maxlen=max(1, limit))
        self._seen = 0  # messages the source gave so far
        self._error: BaseException | None = None
        self._unfollowed = False
        self._changed = asyncio.Event()  # replaced after each change: a follower waits on the one it saw
        self._task = asyncio.create_task(self._drive(source), name=f"kept-{operation_id}")

    @property
    def running(self) -> bool:
        return not self._task.done()

    async def _drive(self, source: AsyncIterator[Message]) -> None:
        try:
            async for message in source:
                self._messages.append((self._seen, message))
                self._seen += 1
                self._wake()
        except asyncio.CancelledError:  # cancel(), or nobody followed it: the operation has wound down
            why = f": nobody followed it for {self.abandon_after:.0f}s" if self._unfollowed else ""
            self._error = Cancelled(f"the operation {self.operation_id} was cancelled{why}")
        except BaseException as err:  # the operation's failure is its ending: followers raise it
            self._error = err
        finally:
            while len(self._messages) > KEPT_AFTER_END:
                self._messages.popleft()
            self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def follow(self) -> AsyncIterator[Message]:
        """The messages kept so far, then each as it comes; raises what the operation failed with. Cancelling the
        follower (its caller went away) leaves the operation running."""
        self._followers += 1
        if self._abandon is not None:
            self._abandon.cancel()
            self._abandon = None
        try:
            after = -1  # the index of the last message given
            while True:
                changed = self._changed
                for index, message in list(self._messages):
                    if index > after:
                        after = index
                        yield message
                if self._task.done() and after == self._seen - 1:
                    if self._error is not None:
                        raise self._error
                    return
                if changed is self._changed:  # nothing new since the snapshot: wait for the next change
                    await changed.wait()
        finally:
            self._followers -= 1
            if not self._followers and self.running:
                self._abandon = asyncio.get_running_loop().call_later(self.abandon_after, self._abandoned)

    def _abandoned(self) -> None:
        self._abandon = None
        if self._followers or not self.running:
            return
        log.warning("nobody followed the kept operation %s for %.0fs: cancelling it", self.operation_id,
                    self.abandon_after)
        self._unfollowed = True
        self._task.cancel()

    async def cancel(self) -> bool:
        """Stop the operation and wait until it has wound down; whether it was still running."""
        if self._task.done():
            return False
        log.info("cancelling the kept operation %s", self.operation_id)
        self._task.cancel()
        await asyncio.wait([self._task])
        return True

    async def wait(self) -> None:
        """Until the operation has ended (either way)."""
        await asyncio.wait([self._task])
