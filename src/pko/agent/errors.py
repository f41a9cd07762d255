"""How a failed Pulumi operation becomes a gRPC error the operator understands.

The reference agent answers a failed operation with status ``UNKNOWN`` and the message ``"<op> failed: <error>"``;
when the CLI's error text shows a known condition (a locked stack, a bad access token) it attaches a
``PulumiErrorInfo`` detail in the standard ``grpc-status-details-bin`` trailer (a serialized ``google.rpc.Status``),
which the operator reads to pick an Update's failure reason. This module holds that mapping, as pure functions;
the trailer itself is the shared contract's (:mod:`pko.protocol.status`).

A status message travels in a trailer (twice when it has details: ``grpc-message`` and inside
``grpc-status-details-bin``). Clients cap trailers: gRPC's C core at 16 KiB by default (the call then ends with
"Stream removed (received metadata size exceeds hard limit)" and the real error is lost), grpc-go at 16 MiB, pko's
operator at 4 MiB. The reference agent sends the CLI's whole output; pko's keeps every status message's head and end
(where the CLI puts the error) within :data:`MAX_MESSAGE_CHARS`, which any of those clients with raised limits
takes; the workspace pod's log keeps the whole output.

It must never log, and never put anything in a status that the CLI did not already print (no environment, no config).
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from pko.protocol import status
from pko.protocol.proto import agent_pb2

# Snippets of CLI error text, and the structured error the operator gets for them.
KNOWN_ERRORS: tuple[tuple[str, int, str, str], ...] = (
    ("Conflict: Another update is currently in progress", 409, "UpdateConflict",
     "Another update is currently in progress"),
    ("invalid access token", 401, "InvalidAccessToken",
     "Invalid access token used to authenticate with Pulumi Cloud"),
)


#: The most of a message a status carries: room for a long diagnostic, never megabytes in a trailer.
MAX_MESSAGE_CHARS = 32 * 1024
_HEAD_CHARS = 2048


def bounded(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`message`, or its head and end with what was cut said in between when it is longer than `limit`."""
    return status.head_and_end(message, limit, _HEAD_CHARS, " (the workspace pod's log has the whole output)")


@dataclass(frozen=True)
class RpcError:
    """An error status to end a call with: a code, a message and optional structured details."""

    code: grpc.StatusCode
    message: str
    error_info: agent_pb2.PulumiErrorInfo | None = None

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        """The ``grpc-status-details-bin`` trailer carrying the details, if any."""
        details = [self.error_info] if self.error_info is not None else []
        return status.trailing_metadata(self.code, self.message, details)


class AgentError(Exception):
    """Raised inside the agent to end an RPC with a specific status."""

    def __init__(self, code: grpc.StatusCode, message: str, error_info: agent_pb2.PulumiErrorInfo | None = None):
        message = bounded(message)  # every status: an install's or an operation's output may be long
        super().__init__(message)
        self.rpc = RpcError(code, message, error_info)


def known_error_info(text: str) -> agent_pb2.PulumiErrorInfo | None:
    """The structured error for CLI output that shows a known failure, else None."""
    for snippet, code, reason, message in KNOWN_ERRORS:
        if snippet in text:
            return agent_pb2.PulumiErrorInfo(code=code, reason=reason, message=message)
    return None


def operation_failed(operation: str, error_text: str) -> AgentError:
    """The error for a failed CLI operation, e.g. ``operation_failed("up", ...)`` → ``UNKNOWN "up failed: ..."``."""
    return AgentError(grpc.StatusCode.UNKNOWN, f"{operation} failed: {error_text}", known_error_info(error_text))
