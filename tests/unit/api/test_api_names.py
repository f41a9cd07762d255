"""The Go operator's names, labels, annotations, finalizer and field managers, spelled once."""

from __future__ import annotations

import pytest

from pko.api import names


def test_object_names_derived_from_a_stack() -> None:
    assert names.workspace_name("my-stack") == "my-stack"
    assert names.workspace_statefulset_name("my-stack") == "my-stack-workspace"
    assert names.workspace_service_name("my-stack") == "my-stack-workspace"
    assert names.workspace_pod_name("my-stack") == "my-stack-workspace-0"
    assert names.outputs_secret_name("my-stack-18f3a2b4c5d") == "my-stack-18f3a2b4c5d-stack-outputs"


def test_update_name_is_stack_dash_hex_milliseconds() -> None:
    assert names.update_name("my-stack", 1_700_000_000_000) == "my-stack-18bcfe56800"
    assert names.update_name("s", 0) == "s-0"
    with pytest.raises(ValueError, match="negative"):
        names.update_name("s", -1)


def test_labels() -> None:
    assert names.stack_component_labels("app") == {"pulumi.com/component": "stack", "pulumi.com/stack-name": "app"}
    assert names.workspace_component_labels("app") == {
        "auto.pulumi.com/component": "workspace", "auto.pulumi.com/workspace-name": "app"}
    assert names.update_component_labels("app-1") == {
        "auto.pulumi.com/component": "update", "auto.pulumi.com/update-name": "app-1"}


def test_annotations_finalizer_and_field_managers() -> None:
    assert names.ANNOTATION_RECONCILE_REQUEST == "pulumi.com/reconciliation-request"
    assert names.ANNOTATION_SECRETS == "pulumi.com/secrets"
    assert names.ANNOTATION_INITIALIZED == "auto.pulumi.com/initialized"
    assert names.ANNOTATION_REVISION_HASH == "auto.pulumi.com/revision-hash"
    assert names.FINALIZER == "finalizer.stack.pulumi.com"
    assert names.FIELD_MANAGER == "pulumi-kubernetes-operator"
    assert [
        f"pulumi-kubernetes-operator/{suffix}" for suffix in (
            "stack-finalizer", "stack-status", "prerequisite-request", "workspace-status", "update-status",
            "program-status")] == [names.FIELD_MANAGER_STACK_FINALIZER, names.FIELD_MANAGER_STACK_STATUS,
            names.FIELD_MANAGER_PREREQUISITE_REQUEST, names.FIELD_MANAGER_WORKSPACE_STATUS,
            names.FIELD_MANAGER_UPDATE_STATUS, names.FIELD_MANAGER_PROGRAM_STATUS]


def test_controller_names() -> None:
    assert (names.STACK_CONTROLLER, names.WORKSPACE_CONTROLLER, names.UPDATE_CONTROLLER,
            names.PROGRAM_CONTROLLER) == ("stack-controller", "workspace-controller", "update-controller",
                                          "program-controller")


def test_update_name_millis_reads_back_what_update_name_wrote() -> None:
    assert names.update_name_millis("my-stack", names.update_name("my-stack", 1_700_000_000_000)) == 1_700_000_000_000
    assert names.update_name_millis("a-b", "a-b-ff") == 255
    assert names.update_name_millis("a", "a-b-ff") is None  # not hex after the stack's name
    assert names.update_name_millis("a", "b-ff") is None
    assert names.update_name_millis("a", "a-") is None
    assert names.update_name_millis("a", "a-" + "f" * 17) is None
