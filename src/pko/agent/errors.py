"""How a failed Pulumi operation becomes a gRPC error the operator understands.

The reference agent answers a failed operation with status ``UNKNOWN`` and the message ``"<op> failed: <error>"``;
when the CLI's error text shows a known condition (a locked stack, a bad access token) it attaches a
``PulumiErrorInfo`` detail in the standard ``grpc-status-details-bin`` trailer (a serialized ``google.rpc.Status``),
which the operator reads to pick an Update's failure reason. This module holds that mapping and the few bytes of
``google.rpc.Status`` encoding it needs, as pure functions.

It must never log, and never put anything in a status that the CLI did not already print (no environment, no config).
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from pko.agent.proto import agent_pb2

STATUS_DETAILS_KEY = "grpc-status-details-bin"
PULUMI_ERROR_INFO_TYPE_URL = "type.googleapis.com/agent.PulumiErrorInfo"

# Snippets of CLI error text, and the structured error the operator gets for them.
KNOWN_ERRORS: tuple[tuple[str, int, str, str], ...] = (
    ("Conflict: Another update is currently in progress", 409, "UpdateConflict",
     "Another update is currently in progress"),
    ("invalid access token", 401, "InvalidAccessToken",
     "Invalid access token used to authenticate with Pulumi Cloud"),
)


@dataclass(frozen=True)
class RpcError:
    """An error status to end a call with: a code, a message and optional structured details."""

    code: grpc.StatusCode
    message: str
    error_info: agent_pb2.PulumiErrorInfo | None = None

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        """The ``grpc-status-details-bin`` trailer carrying the details, if any."""
        if self.error_info is None:
            return ()
        return ((STATUS_DETAILS_KEY, encode_status(self.code, self.message, [self.error_info])),)


class AgentError(Exception):
    """Raised inside the agent to end an RPC with a specific status."""

    def __init__(self, code: grpc.StatusCode, message: str, error_info: agent_pb2.PulumiErrorInfo | None = None):
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


# --- google.rpc.Status wire encoding ---------------------------------------------------------------------------
# message Status { int32 code = 1; string message = 2; repeated google.protobuf.Any details = 3; }
# message Any { string type_url = 1; bytes value = 2; }


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field_bytes(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_status(code: grpc.StatusCode, message: str, details: list[agent_pb2.PulumiErrorInfo]) -> bytes:
    """A serialized ``google.rpc.Status`` with each detail packed as a ``google.protobuf.Any``."""
    numeric: int = code.value[0]
    out = bytearray()
    if numeric:
        out += _varint(1 << 3 | 0) + _varint(numeric)
    if message:
        out += _field_bytes(2, message.encode())
    for detail in details:
        packed = _field_bytes(1, PULUMI_ERROR_INFO_TYPE_URL.encode()) + _field_bytes(2, detail.SerializeToString())
        out += _field_bytes(3, packed)
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """The (field number, value) pairs of a message that uses only varint and length-delimited fields."""
    fields: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = _read_varint(data, pos)
            fields.append((number, value))
        elif wire_type == 2:
            length, pos = _read_varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated field")
            fields.append((number, data[pos:pos + length]))
            pos += length
        else:
            raise ValueError(f"unexpected wire type {wire_type}")
    return fields


def decode_error_info(status_details: bytes) -> list[agent_pb2.PulumiErrorInfo]:
    """The ``PulumiErrorInfo`` details in a serialized ``google.rpc.Status`` (other detail types are skipped)."""
    infos: list[agent_pb2.PulumiErrorInfo] = []
    for number, value in _fields(status_details):
        if number != 3 or not isinstance(value, bytes):
            continue
        any_fields = dict(_fields(value))
        if any_fields.get(1) == PULUMI_ERROR_INFO_TYPE_URL.encode():
            payload = any_fields.get(2, b"")
            infos.append(agent_pb2.PulumiErrorInfo.FromString(payload if isinstance(payload, bytes) else b""))
    return infos
