"""Generated valid specs survive model → JSON → API server → model unchanged, for every kind."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from crd_testlib import assert_not_pruned, create, resource_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lightkube import Client
from schema_strategies import from_schema

from pko.api import crds, program, stack, update, workspace
from pko.api.meta import Wire

# (CRD, model, body field). The pod template is skipped: it is the API server's own PodSpec schema, covered by
# the example manifests; drawing it would dominate the run time. Stack `outputs` (pko) is skipped: its names,
# keys and CEL rules are beyond these strategies; test_outputs_fields.py stores and refuses it on the API server.
# The same holds for the other pko additions with CEL rules, each with its own field test: `workspaceIdleTimeout`
# (tests/e2e/test_workspace_fleet.py), an Update's `idleTimeout` and `timeout` (tests/e2e/test_update_idle_timeout.py),
# `driftDetection` (test_drift_detection_fields.py), `approval` and `destroyProtection`
# (tests/e2e/test_stack_approvals.py, test_stack_destroy_protection.py), `ttl` (test_ttl_field.py), `outputRefs`
# (test_output_refs_fields.py), a Workspace's `shareVolume` (tests/e2e/test_workspace_fleet.py).
KINDS: dict[str, tuple[crds.Manifest, type[Wire], str]] = {
    "Stack": (crds.stacks(), stack.Stack, "spec"),
    "Program": (crds.programs(), program.Program, "program"),
    "Workspace": (crds.workspaces(), workspace.Workspace, "spec"),
    "Update": (crds.updates(), update.Update, "spec"),
}
SKIP = frozenset({"podTemplate"})
# top-level body fields of one kind only
SKIP_IN: dict[str, frozenset[str]] = {"Stack": frozenset({"outputs", "workspaceIdleTimeout", "driftDetection",
                                                          "approval", "destroyProtection", "ttl",
                                                          "outputRefs"}),
                                      "Workspace": frozenset({"idleTimeout", "shareVolume"}),
                                      "Update": frozenset({"idleTimeout", "timeout"})}


def _body_strategy(kind: str) -> st.SearchStrategy[Any]:
    crd, _, field = KINDS[kind]
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    body = dict(root["properties"][field])
    body["properties"] = {k: v for k, v in body["properties"].items() if k not in SKIP_IN.get(kind, ())}
    return from_schema(body, SKIP)


@pytest.mark.parametrize("kind", list(KINDS))
def test_generated_bodies_round_trip(client: Client, namespace: str, kind: str) -> None:
    crd, model_type, field = KINDS[kind]
    group = crd["spec"]["group"]
    version = crd["spec"]["versions"][0]["name"]

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(body=_body_strategy(kind))
    def round_trip(body: Any) -> None:
        name = f"gen-{uuid.uuid4().hex[:12]}"
        model = model_type.model_validate({"apiVersion": f"{group}/{version}", "kind": kind,
                                           "metadata": {"name": name}, field: body})
        sent = model.to_wire()
        stored = create(client, sent, namespace)
        assert_not_pruned(sent[field], stored[field])
        back = model_type.model_validate(stored)
        assert getattr(back, field) == getattr(model, field)
        client.delete(resource_for(sent), name, namespace=namespace)

    round_trip()
