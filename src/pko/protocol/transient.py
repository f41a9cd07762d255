"""Which failures of the agent's work a retry can fix: passing backend and network errors.

A fleet keeps its state in one backend (a bucket, a Pulumi Cloud organisation) and runs many workspaces at once, so
the CLI meets the backend's passing errors: an EOF or a reset connection, a timeout, a throttling or unavailable
answer, a file another stack's save renamed away while the CLI read the bucket. Taking one of those as final left
Stacks `Stalled` until a person touched them. The operator's two uses:

- a workspace's initialisation (Install, SelectStack, SetAllConfig, AddEnvironments) that fails so is not Ready
  and is retried with the controller's backoff, instead of `Stalled`;
- an update that fails so is retried with the Stack's backoff and never counts toward `Stalled` (`maxFailures`).

`Stalled` stays for what a retry cannot fix (a wrong passphrase, a stack that does not exist and may not be created,
an invalid config value, a program error, dependencies that cannot install). The classification is by the agent's
gRPC status and the CLI's error text, and deliberately a list of known passing failures: anything else is final, as
the reference treats every failure. Pure: shared by the controllers, below them.
"""

from __future__ import annotations

import re

import grpc

#: gRPC statuses that say the agent or the way to it failed, not the request: the pod restarted, the call timed out.
#: (Not ABORTED: the agent answers a failed `pulumi install` with it, whatever the cause; the text decides.)
TRANSIENT_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                             grpc.StatusCode.CANCELLED, grpc.StatusCode.RESOURCE_EXHAUSTED})

_TRANSIENT_TEXT = re.compile("|".join((
    r"(^|: )(unexpected )?EOF\b(?! while)",           # a connection or read cut short ("error: EOF"), not a parser
    r"blob \(code=(NotFound|Unavailable|DeadlineExceeded|ResourceExhausted)\)",  # a bucket listing raced a save
    r"connection reset by peer", r"broken pipe", r"connection refused", r"no route to host",
    r"i/o timeout", r"TLS handshake timeout", r"context deadline exceeded", r"Client\.Timeout exceeded",
    r"timed out", r"temporar(il)?y (unavailable|failure)",
    r"\b(SlowDown|RequestTimeout|ServiceUnavailable|InternalError|Throttling|TooManyRequests)\b",  # object stores
    r"\[(429|500|502|503|504)\]",                      # Pulumi Cloud: "[503] Service Unavailable"
    r"(status(Code)?|HTTP)[ :=]*(429|500|502|503|504)\b", r"Too Many Requests",
    r"is still running in this workspace",            # pko's agent: a kept `up` holds the workspace (pko.agent.kept)
    r"the call to the workspace's agent ended with (UNAVAILABLE|DEADLINE_EXCEEDED|CANCELLED|RESOURCE_EXHAUSTED)\b",
)), re.IGNORECASE)


def is_transient(code: grpc.StatusCode | None, message: str) -> bool:
    """Whether a call that failed with `code` (None: no gRPC status, e.g. an update's recorded message) and
    `message` may succeed when tried again."""
    return code in TRANSIENT_CODES or _TRANSIENT_TEXT.search(message) is not None


def lost_agent_message(code: grpc.StatusCode, details: str) -> str:
    """An operation's failure text when the call itself failed with `code` (the agent's pod went away, the
    connection dropped: "Socket closed", "GOAWAY received"): an update's recorded message keeps no gRPC status, so
    the text says it, and :func:`is_transient` reads it back. The operator's own cancellations (an idle timeout, a
    deadline) are told otherwise, before they come here."""
    return f"{details or 'no details'} (the call to the workspace's agent ended with {code.name})"


def retry_message(message: str) -> str:
    """The status and event text of a failure that will be retried."""
    return f"{message} (a passing failure: retrying with backoff)"
