"""The four CustomResourceDefinition manifests, built from the models.

Why: the CRDs users install (``deploy/crds/``, ``pko crds``) must be generated from the same models the
controllers use, so that they cannot drift; a test compares the committed files with :func:`render`. Names,
versions, categories, printer columns, the status subresource and the Stack name rule are the Go operator's.

Must never: write files (the CLI does that), or add anything to a CRD that the Go operator's CRD does not have
(shortNames, conversion webhooks, defaults) beyond the optional Stack fields pko adds (``suspend``,
``retryPolicy``, ``approval``: additive, no defaults, listed in the parity test's allow-list and
docs/compatibility.md). pko's own kind, StackApproval (:data:`PKO_ONLY`), has no Go counterpart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pydantic
import yaml

from pko.api import approval, program, rollout, schema, stack, update, workspace

Manifest = dict[str, Any]

CATEGORY = "pulumi"

_API_VERSION_DOC = "APIVersion defines the versioned schema of this representation of an object."
_KIND_DOC = "Kind is a string value representing the REST resource this object represents."


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    json_path: str
    type: str = "string"
    priority: int = 0

    def to_wire(self) -> dict[str, Any]:
        column: dict[str, Any] = {"jsonPath": self.json_path, "name": self.name}
        if self.priority:
            column["priority"] = self.priority
        column["type"] = self.type
        return column


def _condition(kind: str, field: str = "status") -> str:
    return f'.status.conditions[?(@.type=="{kind}")].{field}'


STACK_COLUMNS = (
    PrinterColumn("Stack", ".spec.stack", priority=10),
    PrinterColumn("Last Update", ".status.lastUpdate.state"),
    PrinterColumn("Age", ".status.lastUpdate.lastResyncTime", type="date"),
    PrinterColumn("Last Commit", ".status.lastUpdate.lastAttemptedCommit", priority=10),
    PrinterColumn("Ready", _condition("Ready")),
    PrinterColumn("Reconciling", _condition("Reconciling", "reason")),
    PrinterColumn("Stalled", _condition("Stalled", "reason")),
    PrinterColumn("Permalink", ".status.lastUpdate.permalink"),
)
PROGRAM_COLUMNS = (
    PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
    PrinterColumn("URL", ".status.artifact.url"),
)
WORKSPACE_COLUMNS = (
    PrinterColumn("Image", ".spec.image"),
    PrinterColumn("Ready", _condition("Ready")),
    PrinterColumn("Address", ".status.address"),
)
UPDATE_COLUMNS = (
    PrinterColumn("Workspace", ".spec.workspaceName"),
    PrinterColumn("Type", ".spec.type", priority=10),
    PrinterColumn("Start Time", ".status.startTime", type="date", priority=10),
    PrinterColumn("End Time", ".status.endTime", type="date", priority=10),
    PrinterColumn("Progressing", _condition("Progressing")),
    PrinterColumn("Failed", _condition("Failed")),
    PrinterColumn("Complete", _condition("Complete")),
    PrinterColumn("URL", ".status.permalink"),
)


APPROVAL_COLUMNS = (
    PrinterColumn("Stack", ".spec.stackName"),
    PrinterColumn("Approved By", ".spec.approvedBy"),
    PrinterColumn("Accepted", _condition("Accepted")),
    PrinterColumn("Reason", _condition("Accepted", "reason")),
    PrinterColumn("Digest", ".spec.digest", priority=10),
    PrinterColumn("Update", ".status.update", priority=10),
    PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
)


def _root_schema(description: str, body: dict[str, type[pydantic.BaseModel]],
                 validations: Sequence[dict[str, str]] = ()) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "apiVersion": {"description": _API_VERSION_DOC, "type": "string"},
        "kind": {"description": _KIND_DOC, "type": "string"},
        "metadata": {"type": "object"},
    }
    for name, model in body.items():
        properties[name] = schema.model_schema(model)
    root: dict[str, Any] = {"description": description, "properties": dict(sorted(properties.items())),
                            "type": "object"}
    if validations:
        root["x-kubernetes-validations"] = list(validations)
    return root


def _crd(group: str, kind: str, plural: str, versions: list[dict[str, Any]]) -> Manifest:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {
                "categories": [CATEGORY],
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
            },
            "scope": "Namespaced",
            "versions": versions,
        },
    }


def _version(name: str, root: dict[str, Any], columns: Sequence[PrinterColumn], *, storage: bool = True
             ) -> dict[str, Any]:
    version: dict[str, Any] = {}
    if columns:
        version["additionalPrinterColumns"] = [c.to_wire() for c in columns]
    version.update({
        "name": name,
        "schema": {"openAPIV3Schema": root},
        "served": True,
        "storage": storage,
        "subresources": {"status": {}},
    })
    return version


def stacks() -> Manifest:
    root = _root_schema(
        "Stack is a Pulumi stack managed by the operator.",
        {"spec": stack.StackSpec, "status": stack.StackStatus},
        [{"message": stack.NAME_RULE_MESSAGE, "rule": stack.NAME_RULE}],
    )
    # v1alpha1 (deprecated, served, no conversion) keeps the Go operator's older schema: the same spec, a status of
    # outputs and lastUpdate only, no name rule and no printer columns.
    alpha = _root_schema("Stack is a Pulumi stack managed by the operator.",
                         {"spec": stack.StackSpec, "status": stack.StackStatusV1Alpha1})
    return _crd(stack.GROUP, stack.KIND, stack.PLURAL, [
        _version("v1", root, STACK_COLUMNS),
        _version("v1alpha1", alpha, (), storage=False),
    ])


def programs() -> Manifest:
    root = _root_schema("Program is an inline Pulumi YAML program.",
                        {"program": program.ProgramSpec, "status": program.ProgramStatus})
    return _crd(program.GROUP, program.KIND, program.PLURAL, [_version(program.VERSION, root, PROGRAM_COLUMNS)])


def workspaces() -> Manifest:
    root = _root_schema(
        "Workspace is an execution context for one Pulumi project and its stacks.",
        {"spec": workspace.WorkspaceSpec, "status": workspace.WorkspaceStatus},
    )
    return _crd(workspace.GROUP, workspace.KIND, workspace.PLURAL,
                [_version(workspace.VERSION, root, WORKSPACE_COLUMNS)])


def updates() -> Manifest:
    root = _root_schema("Update is one Pulumi operation on a stack.",
                        {"spec": update.UpdateSpec, "status": update.UpdateStatus})
    return _crd(update.GROUP, update.KIND, update.PLURAL, [_version(update.VERSION, root, UPDATE_COLUMNS)])


def stack_approvals() -> Manifest:
    root = _root_schema(
        "StackApproval approves one reviewed update plan of a Stack (pko; docs/approvals.md).",
        {"spec": approval.StackApprovalSpec, "status": approval.StackApprovalStatus},
        [{"message": "spec is required", "rule": "has(self.spec)"},
         {"message": approval.SPEC_IMMUTABLE_MESSAGE, "rule": "self.spec == oldSelf.spec"}],
    )
    return _crd(approval.GROUP, approval.KIND, approval.PLURAL,
                [_version(approval.VERSION, root, APPROVAL_COLUMNS)])


ROLLOUT_COLUMNS = (
    PrinterColumn("Phase", ".status.phase"),
    PrinterColumn("Wave", ".status.currentWave", type="integer"),
    PrinterColumn("Ready", _condition("Ready")),
    PrinterColumn("Reason", _condition("Ready", "reason")),
    PrinterColumn("Message", ".status.message", priority=10),
    PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
)


def stack_rollouts() -> Manifest:
    root = _root_schema(
        "StackRollout takes one change through a fleet of Stacks in waves with health gates (pko; docs/rollouts.md).",
        {"spec": rollout.StackRolloutSpec, "status": rollout.StackRolloutStatus},
        [{"message": "spec is required", "rule": "has(self.spec)"}],
    )
    return _crd(rollout.GROUP, rollout.KIND, rollout.PLURAL, [_version(rollout.VERSION, root, ROLLOUT_COLUMNS)])


# pko's own kinds: no Go operator counterpart (the parity test leaves them out).
PKO_ONLY = ("pulumi.com_stackapprovals.yaml", "pulumi.com_stackrollouts.yaml")


def all_crds() -> dict[str, Manifest]:
    """File name (as under ``deploy/crds/``) → manifest, in a stable order: the Go operator's four, then pko's."""
    return {
        "pulumi.com_stacks.yaml": stacks(),
        "pulumi.com_programs.yaml": programs(),
        "auto.pulumi.com_workspaces.yaml": workspaces(),
        "auto.pulumi.com_updates.yaml": updates(),
        "pulumi.com_stackapprovals.yaml": stack_approvals(),
        "pulumi.com_stackrollouts.yaml": stack_rollouts(),
    }


def render(manifest: Manifest) -> str:
    """One manifest as a YAML document (deterministic: the same models always give the same text)."""
    text = yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)
    return f"---\n{text}"


def render_all() -> str:
    """All manifests as one multi-document YAML stream."""
    return "".join(render(m) for m in all_crds().values())
