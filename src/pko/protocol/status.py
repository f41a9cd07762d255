"""The structured error detail of a failed agent call, in the standard ``grpc-status-details-bin`` trailer.

The agent answers a failed Pulumi operation it recognises (a locked stack, a bad access token) with a
``google.rpc.Status`` whose details hold one packed ``agent.PulumiErrorInfo``; the operator reads it to pick an
Update's failure reason. Both sides use ``google.rpc.Status`` from googleapis-common-protos and grpcio-status, so
neither hand-encodes protobuf.

Pure: bytes and messages in and out. Must never log (a status message is the CLI's own error text).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import grpc
from google.rpc import status_pb2
from grpc_status import rpc_status

from pko.protocol.proto import agent_pb2

STATUS_DETAILS_KEY = "grpc-status-details-bin"
#: pko: the reason of an approved `up` whose saved plan the workspace does not hold (it was recreated since the
#: preview, or the plan was used): nothing ran, and only a new preview can give a plan to approve.
REASON_PLAN_NOT_FOUND = "PlanNotFound"
PULUMI_ERROR_INFO_TYPE_URL = "type.googleapis.com/agent.PulumiErrorInfo"

Metadata = Sequence[tuple[str, str | bytes]]


def _status(code: grpc.StatusCode, message: str, details: Iterable[agent_pb2.PulumiErrorInfo]) -> status_pb2.Status:
    numeric: int = code.value[0]
    status = status_pb2.Status(code=numeric, message=message)
    for detail in details:
        status.details.add().Pack(detail)
    return status


def encode_status(code: grpc.StatusCode, message: str, details: Iterable[agent_pb2.PulumiErrorInfo]) -> bytes:
    """A serialized ``google.rpc.Status`` with each detail packed as a ``google.protobuf.Any``."""
    return _status(code, message, details).SerializeToString()


def trailing_metadata(code: grpc.StatusCode, message: str,
                      details: Sequence[agent_pb2.PulumiErrorInfo]) -> tuple[tuple[str, bytes], ...]:
    """The trailer that carries `details` with a failed call's status (none when there are no details)."""
    if not details:
        return ()
    rich = rpc_status.to_status(_status(code, message, details))
    return tuple((str(key), value) for key, value in rich.trailing_metadata if isinstance(value, bytes))


def decode_error_info(status_details: bytes) -> list[agent_pb2.PulumiErrorInfo]:
    """The ``PulumiErrorInfo`` details in a serialized ``google.rpc.Status`` (other detail types are skipped)."""
    infos: list[agent_pb2.PulumiErrorInfo] = []
    for detail in status_pb2.Status.FromString(status_details).details:
        if detail.Is(agent_pb2.PulumiErrorInfo.DESCRIPTOR):
            info = agent_pb2.PulumiErrorInfo()
            detail.Unpack(info)
            infos.append(info)
    return infos


def error_info(metadata: Metadata | None) -> agent_pb2.PulumiErrorInfo | None:
    """The ``PulumiErrorInfo`` detail of a failed call (from ``err.trailing_metadata()``), if it has one."""
    for key, value in metadata or ():
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            infos = decode_error_info(value)
            if infos:
                return infos[0]
    return None


def head_and_end(message: str, limit: int, head: int, note: str = "") -> str:
    """`message`, or its first `head` characters and its end with how many were cut between them (and `note`)
    when it is longer than `limit`; the result is then `limit` long. A failed operation's text is the CLI's output,
    whose error is at its end: the agent keeps its status messages within a trailer's budget, the operator an
    Update's status within an object's (the Go agent sends the whole output)."""
    if len(message) <= limit:
        return message
    marker = ""
    for _ in range(3):  # the count's digits set the marker's length, which sets the count: settled within three
        marker = f"\n… {len(message) - limit + len(marker)} characters cut{note} …\n"
    tail = limit - head - len(marker)
    return message[:head] + marker + message[len(message) - tail:]
