"""The Update a Stack creates for one run (`up`, `preview`, or `destroy` on deletion) — pure.

Named `<stack>-<unix-millis in hex>` like the reference; controlled by the Workspace (so a replacement Workspace
could adopt it) and owned, with blockOwnerDeletion, by the Stack (so the Stack hears about its completion).
`updateTemplate` is laid over it by strategic merge.

Must never: read the clock (callers pass the time) or do I/O.
"""

from __future__ import annotations

import copy
from typing import Any

from pko.api import names
from pko.api import stack as stack_api
from pko.api import update as up_api
from pko.api import workspace as ws_api
from pko.controllers.stack import ttl
from pko.kube import owners, patchmeta, resources, smp
from pko.runtime import sharding

TTL_AFTER_COMPLETED = "24h0m0s"


def kind_for(stack: stack_api.Stack) -> str:
    if stack.metadata.deletion_timestamp is not None:
        return up_api.DESTROY
    return up_api.PREVIEW if stack_api.spec_of(stack).preview else up_api.UP


def build(stack: stack_api.Stack, workspace: ws_api.Workspace, message: str, unix_millis: int,
          shard: sharding.Shard = sharding.EVERYTHING) -> dict[str, Any]:
    name = stack.metadata.name or ""
    stack_spec = stack_api.spec_of(stack)
    kind = kind_for(stack)
    spec: dict[str, Any] = {
        "workspaceName": workspace.metadata.name or "",
        "stackName": stack_spec.stack,
        "type": kind,
        "ttlAfterCompleted": TTL_AFTER_COMPLETED,
        "message": message,
    }
    if kind == up_api.DESTROY:
        spec["runProgram"] = bool(stack_spec.run_program)
    else:
        if stack_spec.targets:
            spec["target"] = list(stack_spec.targets)
        spec["targetDependents"] = bool(stack_spec.target_dependents)
        spec["refresh"] = bool(stack_spec.refresh)
    update = resources.UPDATE.new(names.update_name(name, unix_millis), stack.metadata.namespace, spec=spec)
    update["metadata"]["labels"] = names.stack_component_labels(name) | shard.carried(stack.metadata.labels)
    if stack_spec.update_template:
        update = smp.merge(update, copy.deepcopy(dict(stack_spec.update_template)), patchmeta.UPDATE)
    if kind == up_api.DESTROY and ttl.marked(stack):  # the TTL's destroy must leave nothing (docs/ttl.md); after
        update["metadata"].setdefault("annotations", {})[names.ANNOTATION_EXPECT_EMPTY] = "true"  # the template
    update = owners.set_controller_reference(update, workspace)
    return owners.set_owner_reference(update, stack, block_owner_deletion=True)
