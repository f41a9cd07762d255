"""The committed generated code matches agent.proto, and the wire contract (names, numbers, types) is the
reference's, message by message."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import descriptor as d

from pko.protocol import protogen
from pko.protocol.proto import agent_pb2

T = d.FieldDescriptor


def test_regenerating_changes_nothing(tmp_path: Path) -> None:
    generated = protogen.generate(tmp_path)
    for name, path in generated.items():
        committed = protogen.PROTO_PACKAGE_DIR / name
        assert path.read_text() == committed.read_text(), f"{name} is stale: run python -m pko.protocol.protogen"


def test_service_and_package() -> None:
    service = agent_pb2.DESCRIPTOR.services_by_name["AutomationService"]
    assert service.full_name == "agent.AutomationService"
    methods = {m.name: (m.input_type.name, m.output_type.name, m.server_streaming) for m in service.methods}
    assert methods == {
        "WhoAmI": ("WhoAmIRequest", "WhoAmIResult", False),
        "SelectStack": ("SelectStackRequest", "SelectStackResult", False),
        "Info": ("InfoRequest", "InfoResult", False),
        "SetAllConfig": ("SetAllConfigRequest", "SetAllConfigResult", False),
        "AddEnvironments": ("AddEnvironmentsRequest", "AddEnvironmentsResult", False),
        "Install": ("InstallRequest", "InstallResult", False),
        "Preview": ("PreviewRequest", "PreviewStream", True),
        "Refresh": ("RefreshRequest", "RefreshStream", True),
        "Up": ("UpRequest", "UpStream", True),
        "Destroy": ("DestroyRequest", "DestroyStream", True),
        "PulumiVersion": ("PulumiVersionRequest", "PulumiVersionResult", False),
    }
    # pko's own service beside it (kept `up`s): the reference's service stays as the contract has it
    control = agent_pb2.DESCRIPTOR.services_by_name["OperationControl"]
    assert {m.name: (m.input_type.name, m.output_type.name, m.server_streaming) for m in control.methods} == {
        "Cancel": ("CancelRequest", "CancelResult", False)}
    assert agent_pb2.DESCRIPTOR.GetOptions().go_package == (
        "github.com/pulumi/pulumi-kubernetes-operator/v2/agent/pkg/proto")


S, B, I32, BY, M = T.TYPE_STRING, T.TYPE_BOOL, T.TYPE_INT32, T.TYPE_BYTES, T.TYPE_MESSAGE

# (message, {field: (number, type, repeated, proto3 optional)}) straight from the contract (Appendix A).
CONTRACT: dict[str, dict[str, tuple[int, int, bool, bool]]] = {
    "WhoAmIResult": {"user": (1, S, False, False), "organizations": (2, S, True, False), "url": (3, S, False, False)},
    "SelectStackRequest": {"stack_name": (1, S, False, False), "create": (2, B, False, True),
                           "secrets_provider": (3, S, False, True)},
    "StackSummary": {"name": (1, S, False, False), "last_update": (2, M, False, False),
                     "update_in_progress": (3, B, False, False), "resource_count": (4, I32, False, True),
                     "url": (5, S, False, True)},
    "ConfigItem": {"key": (1, S, False, False), "path": (2, B, False, True), "value": (3, M, False, False),
                   "value_from": (4, M, False, False), "secret": (5, B, False, True)},
    "ConfigValueFrom": {"env": (1, S, False, False), "path": (2, S, False, False), "json": (3, B, False, True)},
    "RefreshRequest": {"parallel": (1, I32, False, True), "message": (2, S, False, True),
                       "expect_no_changes": (3, B, False, True), "target": (4, S, True, False),
                       "run_program": (5, B, False, True)},
    "PreviewRequest": {"parallel": (1, I32, False, True), "message": (2, S, False, True),
                       "expect_no_changes": (3, B, False, True), "replace": (4, S, True, False),
                       "target": (5, S, True, False), "target_dependents": (6, B, False, True),
                       "policy_pack": (7, M, True, False), "refresh": (8, B, False, True)},
    "UpRequest": {"parallel": (1, I32, False, True), "message": (2, S, False, True),
                  "expect_no_changes": (3, B, False, True), "replace": (4, S, True, False),
                  "target": (5, S, True, False), "target_dependents": (6, B, False, True),
                  "policy_pack": (8, M, True, False), "refresh": (9, B, False, True),
                  "continue_on_error": (10, B, False, True)},
    "DestroyRequest": {"parallel": (1, I32, False, True), "message": (2, S, False, True),
                       "target": (3, S, True, False), "target_dependents": (4, B, False, True),
                       "refresh": (5, B, False, True), "continue_on_error": (6, B, False, True),
                       "remove": (7, B, False, True), "run_program": (8, B, False, True)},
    "PreviewResult": {"stdout": (1, S, False, False), "stderr": (2, S, False, False), "summary": (3, M, False, False),
                      "permalink": (4, S, False, True), "project_info": (5, M, False, True)},
    "UpResult": {"stdout": (1, S, False, False), "stderr": (2, S, False, False), "summary": (3, M, False, False),
                 "permalink": (4, S, False, True), "outputs": (5, M, True, False), "project_info": (6, M, False, True)},
    "OutputValue": {"value": (1, BY, False, False), "secret": (2, B, False, False)},
    "UpdateSummary": {"start_time": (1, M, False, False), "end_time": (2, M, False, False),
                      "result": (3, S, False, False), "message": (4, S, False, False)},
    "ProjectInfo": {"name": (1, S, False, False), "runtime": (2, S, False, False)},
    "PulumiErrorInfo": {"code": (1, I32, False, False), "reason": (2, S, False, False),
                        "message": (3, S, False, False)},
    "PulumiVersionResult": {"version": (1, S, False, False)},
    "PolicyPack": {"name": (1, S, False, False)},
    "AddEnvironmentsRequest": {"environment": (1, S, True, False)},
    "SetAllConfigRequest": {"config": (1, M, True, False)},
}


# pko's additive fields (docs/approvals.md, docs/reliability.md): numbered from 100 so they never meet a field the
# reference adds; the Go agent and operator ignore them as unknown fields.
PKO_ADDED: dict[str, dict[str, tuple[int, int, bool, bool]]] = {
    "PreviewRequest": {"save_plan": (100, B, False, True)},
    "PreviewResult": {"plan_digest": (100, S, False, True), "change_summary": (101, M, True, False)},
    "UpRequest": {"plan_digest": (100, S, False, True), "resume_after": (101, M, False, True),
                  "operation_id": (102, S, False, True)},
    "DestroyRequest": {"preview_only": (100, B, False, True)},
    "DestroyResult": {"plan_digest": (100, S, False, True), "change_summary": (101, M, True, False),
                      "resources": (102, S, True, False)},
}


@pytest.mark.parametrize("message", sorted(CONTRACT))
def test_message_fields_match_the_contract(message: str) -> None:
    descriptor = agent_pb2.DESCRIPTOR.message_types_by_name[message]
    actual = {
        f.name: (f.number, f.type, f.is_repeated, f.has_presence and f.containing_oneof is not None
                 and f.containing_oneof.name.startswith("_"))
        for f in descriptor.fields
    }
    assert actual == {**CONTRACT[message], **PKO_ADDED.get(message, {})}
    assert all(number >= 100 for number, *_ in PKO_ADDED.get(message, {}).values())


@pytest.mark.parametrize(("stream", "result"), [("PreviewStream", "PreviewResult"), ("RefreshStream", "RefreshResult"),
                                                ("UpStream", "UpResult"), ("DestroyStream", "DestroyResult")])
def test_streams_are_an_event_struct_or_a_result(stream: str, result: str) -> None:
    descriptor = agent_pb2.DESCRIPTOR.message_types_by_name[stream]
    event, res = descriptor.fields_by_name["event"], descriptor.fields_by_name["result"]
    assert (event.number, event.message_type.full_name) == (1, "google.protobuf.Struct")
    assert (res.number, res.message_type.name) == (2, result)
    assert event.containing_oneof.name == res.containing_oneof.name == "response"


def test_config_item_value_is_a_protobuf_value() -> None:
    fields = agent_pb2.ConfigItem.DESCRIPTOR.fields_by_name
    assert fields["value"].message_type.full_name == "google.protobuf.Value"
    assert fields["value"].containing_oneof.name == fields["value_from"].containing_oneof.name == "v"
