"""Names, labels, annotations, finalizers, field managers and controller names of the Go operator.

Why: these strings are part of the drop-in contract — existing clusters hold objects carrying them (a Stack's
finalizer, a Workspace's labels, the SSA field managers owning status fields), and tools select on them. Every
other package takes them from here instead of spelling them out.

Must never: change a value (that breaks upgrades from the Go operator), or read the clock (callers pass the time).
"""

from __future__ import annotations

import re

# Controllers (as named in events, logs and metrics).
STACK_CONTROLLER = "stack-controller"
WORKSPACE_CONTROLLER = "workspace-controller"
UPDATE_CONTROLLER = "update-controller"
PROGRAM_CONTROLLER = "program-controller"
ROLLOUT_CONTROLLER = "stackrollout-controller"  # pko (docs/rollouts.md)

# Labels.
LABEL_COMPONENT = "pulumi.com/component"
LABEL_STACK_NAME = "pulumi.com/stack-name"
LABEL_AUTO_COMPONENT = "auto.pulumi.com/component"
LABEL_WORKSPACE_NAME = "auto.pulumi.com/workspace-name"
LABEL_UPDATE_NAME = "auto.pulumi.com/update-name"
# pko: Flux's sharding label (docs/scale.md): the operator started with `--shard-key X` reconciles the objects
# labelled X; the default shard's operator those without the label.
LABEL_SHARD_KEY = "sharding.fluxcd.io/key"
COMPONENT_STACK = "stack"
COMPONENT_WORKSPACE = "workspace"
COMPONENT_UPDATE = "update"

# Annotations.
ANNOTATION_RECONCILE_REQUEST = "pulumi.com/reconciliation-request"
ANNOTATION_SECRETS = "pulumi.com/secrets"
ANNOTATION_INITIALIZED = "auto.pulumi.com/initialized"
ANNOTATION_REVISION_HASH = "auto.pulumi.com/revision-hash"
# pko additions (docs/approvals.md): on an Update, a preview that saves its update plan, the plan an `up` must apply,
# and what the plan-saving preview found (written by the Update controller).
ANNOTATION_SAVE_PLAN = "pko.pulumi.com/save-plan"
ANNOTATION_PLAN_DIGEST = "pko.pulumi.com/plan-digest"
ANNOTATION_PLANNED_DIGEST = "pko.pulumi.com/planned-digest"
ANNOTATION_PLANNED_CHANGES = "pko.pulumi.com/planned-changes"
# pko destroy protection (docs/destroy-protection.md): a destroy Update that only previews, what it would delete, and
# the Stack annotation that confirms a previewed destroy by its digest (the alternative to a StackApproval).
ANNOTATION_PREVIEW_ONLY = "pko.pulumi.com/preview-only"
ANNOTATION_PLANNED_RESOURCES = "pko.pulumi.com/planned-resources"
ANNOTATION_CONFIRM_DESTROY = "pko.pulumi.com/confirm-destroy"
# pko TTL (docs/ttl.md): on a Stack, when the operator found its `spec.ttl` passed (its deletion then destroys,
# whatever `destroyOnFinalize` says); on a destroy Update, that it fails unless it leaves the stack empty.
ANNOTATION_EXPIRED = "pko.pulumi.com/expired"
ANNOTATION_EXPECT_EMPTY = "pko.pulumi.com/expect-empty"
# pko stack dependencies (docs/stack-dependencies.md): on the Secret that carries a Stack's referenced outputs, which
# file holds which config key's value, whether it is secret and where it was read.
ANNOTATION_OUTPUT_REF_KEYS = "pko.pulumi.com/output-ref-keys"
ANNOTATION_OUTPUT_REFS_REVISION = "pko.pulumi.com/output-refs"  # on the Workspace's pod template: the values' digest
# pko rollouts (docs/rollouts.md): on a Stack, the StackRollout that changes it now (a Stack is in at most one active
# rollout); on a StackRollout, a request (any new value) to go on past a bake or a failure-rate pause.
ANNOTATION_ROLLOUT = "pko.pulumi.com/rollout"
ANNOTATION_ROLLOUT_PROMOTE = "pko.pulumi.com/promote"
# pko sharding (docs/scale.md): on a Workspace, the leader-election Lease of the operator that made it, so that a shard
# taking the Workspace over can tell whether that operator is gone (a custom selector's Lease is not derivable from
# the Workspace's labels).
ANNOTATION_SHARD_LEASE = "pko.pulumi.com/shard-lease"

# Finalizer on Stacks (and, through server-side apply, on Updates).
FINALIZER = "finalizer.stack.pulumi.com"

# Server-side apply field managers.
FIELD_MANAGER = "pulumi-kubernetes-operator"
FIELD_MANAGER_STACK_FINALIZER = f"{FIELD_MANAGER}/stack-finalizer"
FIELD_MANAGER_STACK_STATUS = f"{FIELD_MANAGER}/stack-status"
FIELD_MANAGER_PREREQUISITE_REQUEST = f"{FIELD_MANAGER}/prerequisite-request"
FIELD_MANAGER_WORKSPACE_STATUS = f"{FIELD_MANAGER}/workspace-status"
FIELD_MANAGER_UPDATE_STATUS = f"{FIELD_MANAGER}/update-status"
FIELD_MANAGER_UPDATE_PLAN = f"{FIELD_MANAGER}/update-plan"
FIELD_MANAGER_APPROVAL_STATUS = f"{FIELD_MANAGER}/approval-status"
FIELD_MANAGER_PROGRAM_STATUS = f"{FIELD_MANAGER}/program-status"
FIELD_MANAGER_STACK_TTL = f"{FIELD_MANAGER}/stack-ttl"  # pko: the expired annotation (docs/ttl.md)
FIELD_MANAGER_ROLLOUT = f"{FIELD_MANAGER}/stack-rollout"  # pko: what a StackRollout changes (docs/rollouts.md)

WORKSPACE_SUFFIX = "-workspace"
OUTPUTS_SECRET_SUFFIX = "-stack-outputs"


def workspace_name(stack_name: str) -> str:
    """A Stack's Workspace has the Stack's name."""
    return stack_name


def workspace_statefulset_name(workspace: str) -> str:
    """The StatefulSet (and headless Service) running a Workspace."""
    return f"{workspace}{WORKSPACE_SUFFIX}"


def workspace_service_name(workspace: str) -> str:
    return f"{workspace}{WORKSPACE_SUFFIX}"


def workspace_pod_name(workspace: str) -> str:
    """The single pod of a Workspace's StatefulSet."""
    return f"{workspace}{WORKSPACE_SUFFIX}-0"


def update_name(stack_name: str, unix_millis: int) -> str:
    """An Update created for a Stack: ``<stack>-<unix milliseconds in lowercase hex>``."""
    if unix_millis < 0:
        raise ValueError("unix_millis must not be negative")
    return f"{stack_name}-{unix_millis:x}"


def update_name_millis(stack_name: str, update: str) -> int | None:
    """When an Update named by :func:`update_name` for `stack_name` was named (unix milliseconds), or None for a
    name of another shape."""
    prefix = f"{stack_name}-"
    digits = update[len(prefix):] if update.startswith(prefix) else ""
    if not digits or len(digits) > 16 or digits.strip("0123456789abcdef"):
        return None
    return int(digits, 16)


def outputs_secret_name(update: str) -> str:
    """The Secret an Update writes its stack outputs to."""
    return f"{update}{OUTPUTS_SECRET_SUFFIX}"


_OUTPUT_KEY_SANITIZER = re.compile(r"[^-._a-zA-Z0-9]")


def outputs_secret_key(output: str) -> str:
    """The key an output has in that Secret: characters a Secret key cannot hold become '_' (as the reference)."""
    return _OUTPUT_KEY_SANITIZER.sub("_", output)


def stack_component_labels(stack_name: str) -> dict[str, str]:
    """Labels of the Workspace and Updates a Stack creates."""
    return {LABEL_COMPONENT: COMPONENT_STACK, LABEL_STACK_NAME: stack_name}


def workspace_component_labels(workspace: str) -> dict[str, str]:
    """Labels (and selector) of a Workspace's StatefulSet, pod and Service."""
    return {LABEL_AUTO_COMPONENT: COMPONENT_WORKSPACE, LABEL_WORKSPACE_NAME: workspace}


def update_component_labels(update: str) -> dict[str, str]:
    """Labels of an Update's outputs Secret."""
    return {LABEL_AUTO_COMPONENT: COMPONENT_UPDATE, LABEL_UPDATE_NAME: update}
