"""The Stack kind (``pulumi.com/v1``, also served as ``v1alpha1``): the object users apply.

Why: a Stack names a Pulumi stack, where its program comes from (git, a Flux source or a Program), its config,
secrets and environment, and how the operator should run it. Everything here is the Go operator's wire contract,
including its deprecated fields (still accepted and honoured) and ``workspaceTemplate`` / ``updateTemplate``,
which are apply configurations of Workspace / Update kept as plain JSON because they are strategic-merge-patched
onto the generated objects. pko adds optional fields: ``suspend`` and ``retryPolicy`` (docs/suspend-and-retries.md),
``outputs`` (docs/outputs.md), ``approval`` (docs/approvals.md), ``destroyProtection`` (docs/destroy-protection.md),
``workspaceIdleTimeout`` (docs/scale-to-zero.md), ``driftDetection`` (with ``status.drift``,
docs/drift-detection.md), ``ttl`` (docs/ttl.md), ``outputRefs`` (docs/stack-dependencies.md); left out, a Stack
means what it means to the Go operator.

Must never: default anything the Go CRD does not default (``workspaceReclaimPolicy`` has an enum, no default),
or interpret ``config`` values (strings or any structured JSON).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import pydantic

from pko.api import conditions, names, update, workspace
from pko.api import drift as drift_api
from pko.api.meta import Conditions, ObjectMeta, ObjectMetaApply, Time, Wire
from pko.api.schema import (
    ApplyConfigurationOf,
    ListType,
    MaxItems,
    MaxLength,
    MaxProperties,
    Minimum,
    Pattern,
    Rule,
    Schemaless,
)

GROUP = "pulumi.com"
VERSION = "v1"
SERVED_VERSIONS = ("v1", "v1alpha1")
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "Stack"
PLURAL = "stacks"

MAX_NAME_LENGTH = 42
NAME_RULE = f"size(self.metadata.name) <= {MAX_NAME_LENGTH}"
NAME_RULE_MESSAGE = f"Stack name must be no more than {MAX_NAME_LENGTH} characters in length."

# ResourceRef.type values (not a CRD enum).
REF_ENV = "Env"
REF_FS = "FS"
REF_SECRET = "Secret"
REF_LITERAL = "Literal"

WorkspaceReclaimPolicy = Literal["Retain", "Delete"]
RECLAIM_RETAIN: WorkspaceReclaimPolicy = "Retain"
RECLAIM_DELETE: WorkspaceReclaimPolicy = "Delete"

STATE_SUCCEEDED = "succeeded"
STATE_FAILED = "failed"


class EnvSelector(Wire):
    """An environment variable of the operator process."""

    name: str


class FSSelector(Wire):
    """A file on the operator's file system."""

    path: str


class SecretSelector(Wire):
    """A key of a Secret (in the Stack's namespace; ``namespace`` is deprecated)."""

    namespace: str | None = None
    name: str
    key: str


class LiteralRef(Wire):
    """A literal value."""

    value: str


class ResourceRef(Wire):
    """Where a value comes from: ``type`` is one of Env, FS, Secret, Literal, with the matching selector."""

    type: str
    env: EnvSelector | None = None
    filesystem: FSSelector | None = None
    secret: SecretSelector | None = None
    literal: LiteralRef | None = None


class ConfigMapRef(Wire):
    """A key of a ConfigMap holding a config value."""

    name: str
    key: str
    json_: bool | None = pydantic.Field(None, alias="json", description="Parse the value as JSON.")


class SSHAuth(Wire):
    """SSH private key (and optional passphrase) for git."""

    ssh_private_key: ResourceRef
    password: ResourceRef | None = None


class BasicAuth(Wire):
    """Username and password for git."""

    user_name: ResourceRef
    password: ResourceRef


class GitHubAppConfig(Wire):
    """GitHub App credentials for git."""

    app_id: ResourceRef = pydantic.Field(alias="appID")
    installation_id: ResourceRef = pydantic.Field(alias="installationID")
    private_key: ResourceRef


class GitAuthConfig(Wire):
    """Git authentication; when several are set: sshAuth, then accessToken, then githubApp, then basicAuth."""

    access_token: ResourceRef | None = None
    ssh_auth: SSHAuth | None = None
    basic_auth: BasicAuth | None = None
    github_app: GitHubAppConfig | None = None


class FluxSourceReference(Wire):
    api_version: str
    kind: str
    name: str


class FluxSourceRef(Wire):
    """A Flux source object whose artifact holds the program."""

    source_ref: FluxSourceReference
    dir: str | None = None


class ProgramReference(Wire):
    """A Program object in the Stack's namespace."""

    name: str


class RequirementSpec(Wire):
    succeeded_within_duration: str | None = None


class PrerequisiteRef(Wire):
    """Another Stack that must have succeeded (recently enough) before this one runs."""

    name: str
    requirement: RequirementSpec | None = None


class ApprovalPolicy(Wire):
    """pko (docs/approvals.md): every update first runs a preview that saves its update plan; the plan is applied
    only after a StackApproval names this Stack and the plan's digest."""

    required: bool | None = pydantic.Field(
        None, description="Apply an update only after a StackApproval of its reviewed preview's plan digest.")
    ttl_seconds: Annotated[int, Minimum(1)] | None = pydantic.Field(
        None, description="A StackApproval older than this is refused as expired (default 3600).")


class DestroyProtection(Wire):
    """pko (docs/destroy-protection.md): deleting a `destroyOnFinalize` Stack first previews the destroy; when it would
    delete more than `threshold` resources, the destroy waits for a confirmation of that preview's digest."""

    enabled: bool | None = pydantic.Field(None, description="Preview the destroy and wait for a confirmation.")
    threshold: Annotated[int, Minimum(0)] | None = pydantic.Field(
        None, description="Destroy without a confirmation when at most this many resources would be deleted "
                          "(default 0: always confirm).")


class RetryPolicy(Wire):
    """pko: how this Stack retries failed updates. Each field left out takes the operator's default (its flags
    `--max-update-failures`, `--retry-backoff-base`, `--retry-backoff-factor`, `--stalled-retry-interval`); the
    backoff cap stays `retryMaxBackoffDurationSeconds`."""

    max_failures: Annotated[int, Minimum(0)] | None = pydantic.Field(
        None, description="The Stack is Stalled once status.lastUpdate.failures (failed retries of the same spec) "
                          "reaches this; 0 stalls at the first failed update (operator default 3).")
    backoff_base_seconds: Annotated[int, Minimum(1)] | None = pydantic.Field(
        None, description="Wait after the first failure; with n failures counted the wait is base·factor^n, up to "
                          "retryMaxBackoffDurationSeconds (operator default 10).")
    backoff_factor: Annotated[int, Minimum(1)] | None = pydantic.Field(
        None, description="Growth of the wait between retries; 1 retries at a constant interval (operator "
                          "default 3).")
    stalled_retry_interval_seconds: Annotated[int, Minimum(0)] | None = pydantic.Field(
        None, description="Retry a Stack Stalled by failed updates this long after its last failure; 0 never "
                          "does (operator default: off).")


# Names of Secrets and ConfigMaps (DNS-1123 subdomains) and the keys of their data, as the API server checks them.
OBJECT_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DATA_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
MAX_OBJECT_NAME = 253
MAX_OUTPUT_KEYS = 256
MAX_TEMPLATE_ENTRIES = 64
MAX_TEMPLATE_LENGTH = 4096
OUTPUTS_TARGET_RULE = "has(self.secretName) || has(self.configMapName)"
OUTPUTS_TARGET_MESSAGE = "spec.outputs needs secretName or configMapName (or both)"
TEMPLATE_KEYS_RULE = f"self.all(k, size(k) <= {MAX_OBJECT_NAME} && k.matches('{DATA_KEY_PATTERN}'))"
TEMPLATE_KEYS_MESSAGE = ("spec.outputs.template keys must be Secret/ConfigMap data keys: letters, digits, '-', '_' "
                         f"and '.', at most {MAX_OBJECT_NAME} characters")

ObjectName = Annotated[str, Pattern(OBJECT_NAME_PATTERN), MaxLength(MAX_OBJECT_NAME)]
DataKey = Annotated[str, Pattern(DATA_KEY_PATTERN), MaxLength(MAX_OBJECT_NAME)]


class OutputRef(Wire):
    """pko (docs/stack-dependencies.md): a config value read from an output of another Stack in this Stack's
    namespace; this Stack updates when the value changes, and only then."""

    stack_name: ObjectName = pydantic.Field(
        description="The Stack, in this Stack's namespace (a name only: references never leave the namespace), "
                    "whose output is read.")
    output: Annotated[str, MaxLength(1024)] = pydantic.Field(description="The name of the output.")
    secret: bool | None = pydantic.Field(
        None, description="Set the config value as a secret even when the output is not one (a secret output "
                          "always is).")


class StackOutputs(Wire):
    """pko: publish the stack's outputs into a Secret and/or a ConfigMap of the Stack's namespace after each
    successful update (docs/outputs.md). The Secret holds every selected output; the ConfigMap only those that are
    not secret. Both are owned by the Stack; an existing object the Stack does not own is never overwritten."""

    __schema_markers__ = (Rule(OUTPUTS_TARGET_RULE, OUTPUTS_TARGET_MESSAGE),)

    secret_name: ObjectName | None = pydantic.Field(
        None, description="The Secret to write (created and owned by the Stack).")
    config_map_name: ObjectName | None = pydantic.Field(
        None, description="The ConfigMap to write (created and owned by the Stack); secret outputs never go into it.")
    keys: Annotated[list[DataKey], ListType("set"), MaxItems(MAX_OUTPUT_KEYS)] | None = pydantic.Field(
        None, description="The outputs to publish, by name; left out, all of them; [] none (only the template).")
    template: Annotated[dict[str, Annotated[str, MaxLength(MAX_TEMPLATE_LENGTH)]],
                        MaxProperties(MAX_TEMPLATE_ENTRIES), Rule(TEMPLATE_KEYS_RULE, TEMPLATE_KEYS_MESSAGE)
                        ] | None = pydantic.Field(
        None, description="Extra data keys rendered from outputs: text with {{ .outputs.<name> }} references "
                          "(a dotted path reaches into structured outputs); no other expressions.")


WorkspaceTemplate = Annotated[dict[str, Any], ApplyConfigurationOf(
    spec=workspace.WorkspaceSpec, status=workspace.WorkspaceStatus, metadata=ObjectMetaApply,
)]
UpdateTemplate = Annotated[dict[str, Any], ApplyConfigurationOf(
    spec=update.UpdateSpec, status=update.UpdateStatus, metadata=ObjectMetaApply,
)]


# pko (docs/ttl.md): a Go duration with a unit that is not zero (the Stack would expire as it is created).
TTL_RULE = ("self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && "
            "!self.matches('^([0]+([.][0]+)?(ns|us|ms|s|m|h))+$')")
TTL_MESSAGE = "ttl must be a duration longer than zero such as 30m, 72h or 1h30m"


class StackSpec(Wire):
    """The desired state of a Pulumi stack managed by the operator."""

    stack: str = pydantic.Field(description="Fully qualified name of the stack to deploy (<org>/<stack>).")
    backend: str | None = pydantic.Field(None, description="Backend URL (PULUMI_BACKEND_URL).")
    access_token_secret: str | None = pydantic.Field(None, description="Deprecated: use envRefs.")
    envs: list[str] | None = pydantic.Field(None, description="Deprecated: use envRefs.")
    env_secrets: list[str] | None = pydantic.Field(None, description="Deprecated: use envRefs.")
    env_refs: dict[str, ResourceRef] | None = None
    # Schemaless in the CRD (any JSON is stored); the Stack controller requires an object and stalls otherwise,
    # so a bad value never breaks reading the Stack.
    config: Annotated[Any, Schemaless()] = pydantic.Field(
        None, description="Stack configuration: strings or structured values.")
    config_ref: dict[str, ConfigMapRef] | None = None
    secrets: dict[str, str] | None = pydantic.Field(None, description="Deprecated: use secretsRef.")
    secrets_ref: dict[str, ResourceRef] | None = None
    secrets_provider: str | None = None
    project_repo: str | None = None
    git_auth_secret: str | None = pydantic.Field(None, description="Deprecated: use gitAuth.")
    git_auth: GitAuthConfig | None = None
    repo_dir: str | None = None
    commit: str | None = None
    branch: str | None = None
    shallow: bool | None = None
    flux_source: FluxSourceRef | None = None
    program_ref: ProgramReference | None = None
    targets: list[str] | None = None
    target_dependents: bool | None = None
    prerequisites: list[PrerequisiteRef] | None = None
    continue_resync_on_commit_match: bool | None = None
    refresh: bool | None = None
    preview: bool | None = pydantic.Field(None, description="Only run previews, never updates.")
    expect_no_refresh_changes: bool | None = None
    destroy_on_finalize: bool | None = None
    run_program: bool | None = None
    retry_on_update_conflict: bool | None = None
    use_local_stack_only: bool | None = None
    resync_frequency_seconds: int | None = None
    retry_max_backoff_duration_seconds: int | None = None
    service_account_name: str | None = None
    workspace_template: WorkspaceTemplate | None = None
    update_template: UpdateTemplate | None = None
    workspace_reclaim_policy: WorkspaceReclaimPolicy | None = None
    environment: Annotated[list[str], ListType("atomic")] | None = None
    # pko additions (docs/suspend-and-retries.md): absent, the Stack behaves exactly as with the Go operator.
    suspend: bool | None = pydantic.Field(
        None, description="pko: start no new update while true (one in flight finishes); deleting the Stack "
                          "still runs its finalizer.")
    retry_policy: RetryPolicy | None = None
    outputs: StackOutputs | None = None
    approval: ApprovalPolicy | None = None
    destroy_protection: DestroyProtection | None = None
    # pko addition (docs/scale-to-zero.md): passed to the Workspace as spec.idleTimeout.
    workspace_idle_timeout: Annotated[str, MaxLength(64), workspace.duration_rule("workspaceIdleTimeout")] | None = (
        pydantic.Field(None, description="pko: scale the Stack's workspace to zero after this long without an "
                                         "update (a Go duration such as 15m; 0s never; absent: the operator's "
                                         "default); the next update wakes it. The Stack stays Ready meanwhile."))
    drift_detection: drift_api.DriftDetection | None = None
    # pko addition (docs/stack-dependencies.md)
    output_refs: Annotated[dict[str, OutputRef], MaxProperties(64)] | None = pydantic.Field(
        None, description="pko: config values read from outputs of other Stacks in this namespace, by config key.")
    # pko addition (docs/ttl.md)
    ttl: Annotated[str, MaxLength(64), Rule(TTL_RULE, TTL_MESSAGE)] | None = pydantic.Field(
        None, description="pko: destroy the stack and delete this Stack once this long has passed since it was "
                          "created (a Go duration such as 72h; the destroy runs whatever destroyOnFinalize says, and "
                          "the Stack goes only when the destroy succeeded and left no resource in the stack).")


class StackUpdateState(Wire):
    """The last completed update of the stack."""

    generation: int | None = None
    reconcile_request: str | None = None
    name: str | None = None
    type: str | None = None
    state: str | None = None
    message: str | None = None
    last_attempted_commit: str | None = None
    last_successful_commit: str | None = None
    permalink: str | None = None
    last_resync_time: Time | None = None
    failures: int | None = None
    # pko addition (docs/metrics.md): the Update's `status.resourceChanges`; the Go operator never writes it
    resource_changes: dict[str, Annotated[int, Minimum(0)]] | None = pydantic.Field(
        None, description="pko: resources the update changed, by operation (create, update, delete, replace, "
                          "same, ...), as its Update reported them.")
    # pko addition (docs/stack-dependencies.md): never a value, only its digest
    output_refs: dict[str, str] | None = pydantic.Field(
        None, description="pko: a digest of each referenced output value (spec.outputRefs) the update used, by "
                          "config key.")


class CurrentStackUpdate(Wire):
    """The update in flight, if any."""

    generation: int | None = None
    reconcile_request: str | None = None
    name: str | None = None
    commit: str | None = None
    output_refs: dict[str, str] | None = pydantic.Field(
        None, description="pko: a digest of each referenced output value (spec.outputRefs) the update uses.")


class PlanReview(Wire):
    """pko (docs/approvals.md): the update plan waiting for (or applied after) an approval, and the inputs it was
    previewed for: a change of generation, reconcile request or commit makes it stale."""

    state: str | None = pydantic.Field(None, description="Previewing, AwaitingApproval, Approved or Unsupported.")
    operation: str | None = pydantic.Field(None, description="update, or destroy (destroy protection).")
    preview: str | None = pydantic.Field(None, description="The preview Update that saved the plan.")
    digest: str | None = pydantic.Field(None, description="SHA-256 of the saved plan: what a StackApproval names.")
    changes: dict[str, int] | None = pydantic.Field(None, description="The preview's resource changes by operation.")
    resources: list[str] | None = pydantic.Field(
        None, description="Destroy protection: the URNs the destroy would delete (at most 100).")
    generation: int | None = None
    reconcile_request: str | None = None
    commit: str | None = None
    output_refs: str | None = pydantic.Field(
        None, description="pko: the Secret of referenced output values (spec.outputRefs) the plan was previewed "
                          "with.")
    previewed_at: Time | None = None
    approval: str | None = pydantic.Field(None, description="The StackApproval that approved the plan.")
    approved_by: str | None = None


class StackStatus(Wire):
    """The observed state of a Stack."""

    observed_generation: int | None = None
    observed_reconcile_request: str | None = None
    conditions: Conditions | None = None
    outputs: dict[str, Any] | None = None
    last_update: StackUpdateState | None = None
    current_update: CurrentStackUpdate | None = None
    project_info: workspace.ProjectInfo | None = None
    approval: PlanReview | None = None  # pko (docs/approvals.md)
    drift: drift_api.DriftStatus | None = None  # pko: spec.driftDetection
    # pko (docs/suspend-and-retries.md): what `kubectl pko` shows as the next retry, with the operator's settings
    next_retry_time: Time | None = pydantic.Field(
        None, description="pko: when the failure policy retries the failed last update by itself (the Stack's "
                          "retryPolicy and the operator's settings applied); absent when no retry is scheduled.")


class StackStatusV1Alpha1(Wire):
    """The observed state of a Stack as the deprecated v1alpha1 version serves it (the Go operator's older status:
    no conditions, no observed generation)."""

    outputs: dict[str, Any] | None = None
    last_update: StackUpdateState | None = None


class Stack(Wire):
    """A Stack object."""

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: ObjectMeta = pydantic.Field(default_factory=ObjectMeta)
    spec: StackSpec | None = None
    status: StackStatus | None = None


def spec_of(stack: Stack) -> StackSpec:
    """The spec of a Stack: the CRD requires it, so a Stack read from the API server always has one."""
    if stack.spec is None:
        raise ValueError(f"Stack {stack.metadata.namespace}/{stack.metadata.name} has no spec")
    return stack.spec


def up_to_date(obj: Mapping[str, Any]) -> bool:
    """Whether a Stack object (wire form) is Ready at its current generation and reconciliation request: what a
    Stack that names it as a prerequisite, and a StackRollout that changed it, read as done."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    request = (meta.get("annotations") or {}).get(names.ANNOTATION_RECONCILE_REQUEST, "")
    ready = any(isinstance(c, dict) and c.get("type") == conditions.READY and c.get("status") == "True"
                for c in status.get("conditions") or [])
    return (ready and status.get("observedGeneration") == int(meta.get("generation") or 0)
            and status.get("observedReconcileRequest", "") == request)
