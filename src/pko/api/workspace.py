"""The Workspace kind (``auto.pulumi.com/v1alpha1``): one Pulumi project checked out in a pod, driven over gRPC.

Why: the Stack controller writes Workspaces and the Workspace controller turns them into a StatefulSet and a
Service; users may also write them directly. The wire shape, defaults (``serviceAccountName: default``,
``securityProfile: restricted``) and list semantics are the Go operator's. Pod-level fields are Kubernetes core
types kept as plain JSON here (they are strategic-merge-patched, not interpreted) with their full schema inlined
into the CRD.

Must never: interpret pod fields, or add a Python default that the API server would not apply.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import pydantic

from pko.api.meta import Conditions, EmbeddedObjectMeta, Int32, ObjectMeta, Wire
from pko.api.schema import CoreType, ListType, MapType, MaxLength, Minimum, Rule

GROUP = "auto.pulumi.com"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "Workspace"
PLURAL = "workspaces"

SecretKeySelector = Annotated[dict[str, Any], CoreType("io.k8s.api.core.v1.SecretKeySelector")]
EnvVar = Annotated[dict[str, Any], CoreType("io.k8s.api.core.v1.EnvVar")]
EnvFromSource = Annotated[dict[str, Any], CoreType("io.k8s.api.core.v1.EnvFromSource")]
ResourceRequirements = Annotated[dict[str, Any], CoreType("io.k8s.api.core.v1.ResourceRequirements")]
PodSpec = Annotated[dict[str, Any], CoreType("io.k8s.api.core.v1.PodSpec")]

# Any string, as in the Go operator's CRD (its `+enum` marker is not a CRD enum): "restricted" runs the pod under the
# Restricted Pod Security Standard, any other value (normally "baseline") as Baseline. A CRD enum here would refuse
# manifests the Go operator accepts.
SecurityProfile = str
SECURITY_PROFILE_BASELINE: SecurityProfile = "baseline"
SECURITY_PROFILE_RESTRICTED: SecurityProfile = "restricted"
DEFAULT_IMAGE_BASELINE = "pulumi/pulumi:latest"
DEFAULT_IMAGE_RESTRICTED = "pulumi/pulumi:latest-nonroot"

# pko: a Go duration without a sign ("15m", "1h30m", "90s"; "0" or "0s" never scales to zero). `[.]` rather than an
# escaped dot keeps the CEL string free of backslashes.
DURATION_RULE = "self == '0' || self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')"


def duration_rule(field: str) -> Rule:
    """The API server's check of an idle timeout, with a message that names `field` and shows good values."""
    return Rule(DURATION_RULE, f"{field} must be a duration such as 15m, 1h30m or 90s (0s never scales the "
                               "workspace to zero)")


IdleTimeout = Annotated[str, MaxLength(64), duration_rule("idleTimeout")]
#: pko: a storage quantity in the form a claim takes (2Gi, 500Mi, 10G); `[.]` keeps the CEL string free of
#: backslashes.
QUANTITY_PATTERN = "^[0-9]+([.][0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"
QUANTITY_MESSAGE = "size must be a storage quantity such as 2Gi or 500Mi (0: an emptyDir, no claim)"
Quantity = Annotated[str, MaxLength(32), Rule(f"self.matches('{QUANTITY_PATTERN}')", QUANTITY_MESSAGE)]


def is_quantity(text: str) -> bool:
    """What the API server's rule for a ``shareVolume.size`` accepts."""
    return len(text) <= 32 and re.fullmatch(QUANTITY_PATTERN, text) is not None


class ShareVolume(Wire):
    """pko (docs/scale-to-zero.md#keep-what-a-workspace-installed): the workspace pod's ``/share`` on a claim of its
    own that outlives its pods, instead of an emptyDir."""

    size: Quantity = pydantic.Field(
        description="The claim's size, such as 2Gi; 0 keeps the emptyDir (a workspace's way out of the operator's "
                    "--workspace-share-volume-size).")
    storage_class_name: Annotated[str, MaxLength(253)] | None = pydantic.Field(
        None, description="The claim's StorageClass (absent: the operator's, else the cluster's default).")


class GitHubAppAuth(Wire):
    """GitHub App credentials, each read from a Secret key."""

    app_id: SecretKeySelector = pydantic.Field(alias="appID")
    installation_id: SecretKeySelector = pydantic.Field(alias="installationID")
    private_key: SecretKeySelector


class GitAuth(Wire):
    """Git credentials from Secret keys: an SSH key, a token, a username/password pair or a GitHub App."""

    ssh_private_key: SecretKeySelector | None = None
    username: SecretKeySelector | None = None
    password: SecretKeySelector | None = None
    token: SecretKeySelector | None = None
    github_app: GitHubAppAuth | None = None


class GitSource(Wire):
    """A git repository to clone the Pulumi project from."""

    url: str | None = None
    ref: str | None = pydantic.Field(None, description="Git ref (tag, branch or commit SHA) to fetch.")
    dir: str | None = pydantic.Field(None, description="Directory of Pulumi.yaml within the repository.")
    auth: GitAuth | None = None
    shallow: bool | None = None


class FluxSource(Wire):
    """A Flux source artifact (tarball) to fetch the Pulumi project from."""

    url: str | None = None
    digest: str | None = None
    dir: str | None = None


class LocalSource(Wire):
    """A Pulumi project already present in the workspace image."""

    dir: str | None = None


class ProjectInfo(Wire):
    """A Pulumi project's name and runtime (enough to destroy a stack without its source)."""

    name: str
    runtime: str


class EmbeddedPodTemplateSpec(Wire):
    """Overrides for the workspace pod, strategic-merge-patched onto the generated one."""

    metadata: EmbeddedObjectMeta | None = None
    spec: PodSpec | None = None


class ServiceTemplate(Wire):
    """Metadata for the workspace's headless Service."""

    metadata: EmbeddedObjectMeta | None = None


class ConfigValueFrom(Wire):
    """A config value read inside the workspace, from an environment variable or a file."""

    __schema_markers__ = (MapType("atomic"),)

    env: str | None = None
    path: str | None = None
    json_: bool | None = pydantic.Field(None, alias="json", description="Parse the value as JSON.")


class ConfigItem(Wire):
    """One stack configuration value."""

    __schema_markers__ = (MapType("atomic"),)

    key: str
    path: bool | None = None
    value: Any = None
    value_from: ConfigValueFrom | None = None
    secret: bool | None = None


class WorkspaceStack(Wire):
    """A stack of the workspace's project, selected (and created) before operations run."""

    name: str
    create: bool | None = None
    secrets_provider: str | None = None
    config: Annotated[list[ConfigItem], ListType("map", ("key",))] | None = None
    environment: Annotated[list[str], ListType("atomic")] | None = None


class WorkspaceSpec(Wire):
    """The desired state of a Workspace."""

    service_account_name: str = "default"
    security_profile: SecurityProfile = "restricted"
    image: str | None = None
    image_pull_policy: str | None = None
    git: GitSource | None = None
    flux: FluxSource | None = None
    local: LocalSource | None = None
    project_info: ProjectInfo | None = None
    env_from: Annotated[list[EnvFromSource], ListType("atomic")] | None = None
    env: Annotated[list[EnvVar], ListType("map", ("name",))] | None = None
    resources: ResourceRequirements | None = None
    pod_template: EmbeddedPodTemplateSpec | None = None
    service_template: ServiceTemplate | None = None
    pulumi_log_level: Int32 | None = pydantic.Field(None, description="Verbosity of the Pulumi CLI logs.")
    stacks: Annotated[list[WorkspaceStack], ListType("map", ("name",))] | None = None
    # pko addition (docs/scale-to-zero.md): absent, the operator's --workspace-idle-timeout (default: never).
    idle_timeout: IdleTimeout | None = pydantic.Field(
        None, description="pko: scale the workspace to zero after this long without an Update (a Go duration such "
                          "as 15m; 0s never); the next Update wakes it.")
    # pko addition (docs/scale-to-zero.md#keep-what-a-workspace-installed): absent, the operator's
    # --workspace-share-volume-size (default: an emptyDir, as the Go operator).
    share_volume: ShareVolume | None = pydantic.Field(
        None, description="pko: keep the pod's /share (the program's installed packages, plugins and build caches) "
                          "on a PersistentVolumeClaim that outlives the pod, so a wake or a new pod does not install "
                          "again.")


class AppliedState(Wire):
    """pko: what the running agent was started and configured for (docs/config-without-restart.md). A change of
    `stacks[].config` values only keeps `podGeneration` (no new pod) and moves `configGeneration` once the agent
    has applied the new values."""

    pod_generation: int | None = pydantic.Field(
        None, description="The generation whose pod runs (its revision-hash); a config-only change keeps it.")
    pod_digest: str | None = pydantic.Field(
        None, description="Digest of the spec without config values, to tell a config-only change.")
    config_generation: int | None = pydantic.Field(
        None, description="The generation whose stacks[].config the agent has applied.")


class WorkspaceStatus(Wire):
    """The observed state of a Workspace."""

    observed_generation: Annotated[int, Minimum(0)] | None = None
    address: str | None = None
    pulumi_version: str | None = None
    conditions: Conditions | None = None
    applied: AppliedState | None = None


class Workspace(Wire):
    """A Workspace object."""

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: ObjectMeta = pydantic.Field(default_factory=ObjectMeta)
    spec: WorkspaceSpec | None = None
    status: WorkspaceStatus | None = None
