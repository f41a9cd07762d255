"""Failures carry the reference's codes, messages and PulumiErrorInfo details in grpc-status-details-bin."""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

from pko.agent import errors
from pko.protocol import client
from pko.protocol import status as rpc_status
from pko.protocol.proto import agent_pb2


def _status_class() -> type:
    """google.rpc.Status built from its schema in a private pool, to check our hand encoding against protobuf."""
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(any_pb2.DESCRIPTOR.serialized_pb)
    file = descriptor_pb2.FileDescriptorProto(name="test/status.proto", package="google.rpc", syntax="proto3",
                                              dependency=["google/protobuf/any.proto"])
    msg = file.message_type.add(name="Status")
    F = descriptor_pb2.FieldDescriptorProto
    msg.field.add(name="code", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    msg.field.add(name="message", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    msg.field.add(name="details", number=3, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                  type_name=".google.protobuf.Any")
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("google.rpc.Status"))


def test_update_conflict() -> None:
    err = errors.operation_failed("up", "error: [409] Conflict: Another update is currently in progress.")
    assert err.rpc.code == grpc.StatusCode.UNKNOWN
    assert err.rpc.message.startswith("up failed: error: [409] Conflict")
    assert err.rpc.error_info == agent_pb2.PulumiErrorInfo(code=409, reason="UpdateConflict",
                                                           message="Another update is currently in progress")


def test_invalid_access_token_and_unknown() -> None:
    info = errors.known_error_info("error: invalid access token")
    assert info is not None
    assert (info.code, info.reason) == (401, "InvalidAccessToken")
    assert errors.operation_failed("preview", "boom").rpc.error_info is None
    assert errors.operation_failed("preview", "boom").rpc.trailing_metadata() == ()


def test_status_details_encoding_matches_protobuf() -> None:
    info = agent_pb2.PulumiErrorInfo(code=409, reason="UpdateConflict", message="Another update is in progress")
    encoded = rpc_status.encode_status(grpc.StatusCode.UNKNOWN, "up failed: x" * 20, [info])
    status = _status_class().FromString(encoded)
    assert (status.code, status.message) == (2, "up failed: x" * 20)
    assert status.details[0].type_url == "type.googleapis.com/agent.PulumiErrorInfo"
    assert agent_pb2.PulumiErrorInfo.FromString(status.details[0].value) == info
    assert rpc_status.decode_error_info(encoded) == [info]


def test_trailer_key() -> None:
    err = errors.operation_failed("up", "Conflict: Another update is currently in progress")
    ((key, value),) = err.rpc.trailing_metadata()
    assert key == "grpc-status-details-bin"
    assert rpc_status.decode_error_info(value)[0].reason == "UpdateConflict"


def test_client_reads_the_detail_from_trailing_metadata() -> None:
    err = errors.operation_failed("destroy", "Conflict: Another update is currently in progress")
    info = client.error_info((("other", "x"), *err.rpc.trailing_metadata()))
    assert info is not None
    assert info.reason == "UpdateConflict"
    assert client.error_info(None) is None


def test_a_long_status_message_keeps_its_head_and_its_end_within_the_trailer_budget() -> None:
    output = "up failed: " + "".join(f"line {i}: diagnostic text\n" for i in range(2000)) + "error: the real cause"
    output *= 2  # over 32 KiB
    err = errors.operation_failed("up", output)
    message = err.rpc.message
    original = f"up failed: {output}"
    assert abs(len(message) - errors.MAX_MESSAGE_CHARS) <= 2
    assert message.startswith("up failed: up failed: line 0: diagnostic text\n")
    assert message.endswith("error: the real cause")
    head, _, rest = message.partition("\n… ")
    number, _, rest = rest.partition(" characters cut (the workspace pod's log has the whole output) …\n")
    assert original.startswith(head)
    assert original.endswith(rest)
    assert len(head) + int(number) + len(rest) == len(original)  # the count is what was cut
    assert str(err) == message
    short = errors.AgentError(grpc.StatusCode.ABORTED, "npm error 404")
    assert short.rpc.message == "npm error 404"
