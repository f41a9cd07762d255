"""The Workspace a Stack runs in, built exactly as the Go operator's `setupWorkspace` builds it — pure.

Order matters (it is visible in the Workspace and rolls the pod when it changes): service account, backend and
access-token env, `envRefs` (sorted), then the stack's config items — `config`, `configRef` (ConfigMap volumes),
`secrets`, `secretsRef` (Secret volumes), pko's `outputRefs` (one Secret volume) — each group sorted by key, then
`workspaceTemplate` by strategic merge, then the deprecated `envs`/`envSecrets` as envFrom. Spec errors raise
:class:`StallError` with the reference's messages; they become Stalled/SpecInvalid.

Must never: read Secrets (values stay references; only the Stack controller's git-auth step reads them) or do I/O.
"""

from __future__ import annotations

import copy
import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pko.api import names
from pko.api import stack as stack_api
from pko.api import workspace as ws_api
from pko.controllers.stack import outputrefs, shardmove
from pko.kube import owners, patchmeta, resources, smp
from pko.runtime import sharding

CONFIGMAP_MOUNT_ROOT = "/var/run/configmaps/stacks.pulumi.com/configmaps/"
SECRET_MOUNT_ROOT = "/var/run/secrets/stacks.pulumi.com/secrets/"


class StallError(Exception):
    """The Stack's spec cannot be processed as written (the message is shown on status and in an event)."""


NAMESPACE_ISOLATION = "cross-namespace refs are not allowed"
DEPRECATED_ENV = 'ref type "Env" is deprecated'
DEPRECATED_FS = 'ref type "FS" is deprecated'


@dataclass(frozen=True)
class Source:
    """Where the Workspace gets its program: exactly one of git / flux / project info (or none)."""

    git: dict[str, Any] | None = None
    flux: dict[str, Any] | None = None
    project_info: dict[str, str] | None = None


def _check_ref(ref: stack_api.ResourceRef, namespace: str) -> None:
    if ref.type == stack_api.REF_ENV:
        raise StallError(DEPRECATED_ENV)
    if ref.type == stack_api.REF_FS:
        raise StallError(DEPRECATED_FS)
    if ref.type == stack_api.REF_SECRET and ref.secret is not None and ref.secret.namespace not in (None, "",
                                                                                                    namespace):
        raise StallError(NAMESPACE_ISOLATION)


def _env_var(name: str, ref: stack_api.ResourceRef, namespace: str) -> dict[str, Any]:
    _check_ref(ref, namespace)
    if ref.type == stack_api.REF_LITERAL:
        if ref.literal is None:
            raise StallError(f'resolving env variable reference for "{name}": missing literal reference in ResourceRef')
        return {"name": name, "value": ref.literal.value}
    if ref.type == stack_api.REF_SECRET:
        if ref.secret is None:
            raise StallError(f'resolving env variable reference for "{name}": missing secret reference in ResourceRef')
        return {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.secret.name, "key": ref.secret.key}}}
    raise StallError(f'resolving env variable reference for "{name}": unsupported selector type: {ref.type}')


class _Builder:
    def __init__(self, stack: stack_api.Stack) -> None:
        self.stack = stack
        self.spec = stack_api.spec_of(stack)
        self.namespace = stack.metadata.namespace or ""
        self.pulumi: dict[str, Any] = {"name": "pulumi"}
        self.volumes: list[dict[str, Any]] = []
        self.env: list[dict[str, Any]] = []
        self.config: list[dict[str, Any]] = []
        self.pod_annotations: dict[str, str] = {}

    def mount(self, volume: str, path: str, source: dict[str, Any]) -> None:
        mounts = self.pulumi.setdefault("volumeMounts", [])
        if not any(m["name"] == volume for m in mounts):
            mounts.append({"name": volume, "mountPath": path})
            self.volumes.append({"name": volume, **source})

    def environment(self) -> None:
        if self.spec.backend:
            self.env.append({"name": "PULUMI_BACKEND_URL", "value": self.spec.backend})
        if self.spec.access_token_secret:
            self.env.append({"name": "PULUMI_ACCESS_TOKEN", "valueFrom": {
                "secretKeyRef": {"name": self.spec.access_token_secret, "key": "accessToken"}}})
        for name in sorted(self.spec.env_refs or {}):
            self.env.append(_env_var(name, (self.spec.env_refs or {})[name], self.namespace))

    def configuration(self) -> None:
        spec = self.spec
        config = spec.config if isinstance(spec.config, dict) else {}
        for key in sorted(config):
            self.config.append({"key": key, "value": config[key], "secret": False})
        for key in sorted(spec.config_ref or {}):
            ref = (spec.config_ref or {})[key]
            mount = CONFIGMAP_MOUNT_ROOT + ref.name
            self.mount(f"configmap-{ref.name}", mount, {"configMap": {"name": ref.name}})
            value_from: dict[str, Any] = {"path": posixpath.join(mount, ref.key)}
            if ref.json_ is not None:
                value_from["json"] = ref.json_
            self.config.append({"key": key, "valueFrom": value_from, "secret": False})
        for key in sorted(spec.secrets or {}):
            self.config.append({"key": key, "value": (spec.secrets or {})[key], "secret": True})
        for key in sorted(spec.secrets_ref or {}):
            secret_ref = (spec.secrets_ref or {})[key]
            _check_ref(secret_ref, self.namespace)  # the reference shows these stall errors unwrapped
            if secret_ref.type == stack_api.REF_LITERAL and secret_ref.literal is not None:
                self.config.append({"key": key, "value": secret_ref.literal.value, "secret": True})
            elif secret_ref.type == stack_api.REF_SECRET and secret_ref.secret is not None:
                secret = secret_ref.secret
                mount = SECRET_MOUNT_ROOT + secret.name
                self.mount(f"secret-{secret.name}", mount, {"secret": {"secretName": secret.name}})
                self.config.append({"key": key, "valueFrom": {"path": posixpath.join(mount, secret.key)},
                                    "secret": True})
            else:
                raise StallError(f'updating secretRef for "{key}": missing reference in ResourceRef')

    def referenced_outputs(self, carried: outputrefs.Carried | None) -> None:
        """pko `outputRefs`, last: the values from the Secret that carries them (docs/stack-dependencies.md)."""
        if carried is None:
            return
        self.mount(outputrefs.VOLUME, outputrefs.MOUNT, {"secret": {"secretName": carried.secret_name}})
        self.config.extend(carried.config)
        self.pod_annotations[names.ANNOTATION_OUTPUT_REFS_REVISION] = carried.revision  # new values: a new pod


def desired(stack: stack_api.Stack, source: Source, outputs: outputrefs.Carried | None = None,
            shard: sharding.Shard = sharding.EVERYTHING) -> dict[str, Any]:
    """The Workspace to apply for `stack` (controller-owned by it); `outputs`: the values its `outputRefs` read;
    `shard`: the operator's, whose watches must select the Workspace as they select the Stack."""
    builder = _Builder(stack)
    spec = stack_api.spec_of(stack)
    name = stack.metadata.name or ""
    builder.environment()
    builder.configuration()
    builder.referenced_outputs(outputs)

    ws_stack: dict[str, Any] = {"name": spec.stack, "create": not bool(spec.use_local_stack_only)}
    if spec.environment:
        ws_stack["environment"] = list(spec.environment)
    if spec.secrets_provider:
        ws_stack["secretsProvider"] = spec.secrets_provider
    if builder.config:
        ws_stack["config"] = builder.config

    ws_spec: dict[str, Any] = {}
    if spec.service_account_name:
        ws_spec["serviceAccountName"] = spec.service_account_name
    if builder.env:
        ws_spec["env"] = builder.env
    if source.git is not None:
        ws_spec["git"] = source.git
    if source.flux is not None:
        ws_spec["flux"] = source.flux
    if source.project_info is not None:
        ws_spec["projectInfo"] = source.project_info
    if spec.workspace_idle_timeout is not None:  # pko: scale-to-zero (docs/scale-to-zero.md)
        ws_spec["idleTimeout"] = spec.workspace_idle_timeout
    pod_spec: dict[str, Any] = {"containers": [builder.pulumi]}
    if builder.volumes:
        pod_spec["volumes"] = builder.volumes
    ws_spec["podTemplate"] = {"spec": pod_spec}
    if builder.pod_annotations:
        ws_spec["podTemplate"]["metadata"] = {"annotations": builder.pod_annotations}

    workspace = resources.WORKSPACE.new(name, stack.metadata.namespace, spec=ws_spec)
    # pko: the Stack's shard label (and what a custom watch selector looks at) goes with it, so the operator that
    # reconciles the Stack reconciles its Workspace (docs/scale.md)
    workspace["metadata"]["labels"] = names.stack_component_labels(name) | shard.carried(stack.metadata.labels)
    if (lease := shardmove.own_lease(shard)) is not None:  # who to ask whether its operator is gone, on a move
        workspace["metadata"].setdefault("annotations", {})[names.ANNOTATION_SHARD_LEASE] = lease
    if spec.workspace_template:
        template = copy.deepcopy(dict(spec.workspace_template))
        workspace = smp.merge(workspace, template, patchmeta.WORKSPACE)
        _check_share_volume(workspace.get("spec") or {})
    # The stack entry is appended after the template merge, as the reference does (CreateWorkspace).
    workspace.setdefault("spec", {}).setdefault("stacks", []).append(ws_stack)
    env_from = workspace["spec"].setdefault("envFrom", [])
    env_from += [{"configMapRef": {"name": n}} for n in spec.envs or []]
    env_from += [{"secretRef": {"name": n}} for n in spec.env_secrets or []]
    if not env_from:
        workspace["spec"].pop("envFrom")
    owner = {"apiVersion": stack_api.API_VERSION, "kind": stack_api.KIND,
             "metadata": {"name": name, "uid": stack.metadata.uid, "namespace": stack.metadata.namespace}}
    return owners.set_controller_reference(workspace, owner)


def _check_share_volume(ws_spec: Mapping[str, Any]) -> None:
    """pko: the Workspace CRD refuses a ``shareVolume`` size that is not a quantity, and a Stack's workspaceTemplate
    (an apply configuration, unchecked by the API server) would then fail at every apply: say it on the Stack."""
    share = ws_spec.get("shareVolume")
    if share is None:
        return
    size = share.get("size") if isinstance(share, dict) else None
    if not isinstance(size, str) or not ws_api.is_quantity(size):
        raise StallError(f"workspaceTemplate.spec.shareVolume.{ws_api.QUANTITY_MESSAGE}, not {json.dumps(size)}")


def git_source(spec: stack_api.StackSpec, commit: str) -> dict[str, Any]:
    """The Workspace `git` source for a resolved commit, with auth as Secret key selectors."""
    git: dict[str, Any] = {"url": spec.project_repo, "ref": commit}
    if spec.repo_dir:
        git["dir"] = spec.repo_dir
    if spec.shallow:
        git["shallow"] = True
    auth: dict[str, Any] = {}
    if spec.git_auth_secret:
        for field, key in (("sshPrivateKey", "sshPrivateKey"), ("password", "password"),
                           ("username", "username"), ("token", "accessToken")):
            auth[field] = {"name": spec.git_auth_secret, "key": key, "optional": True}
    git_auth = spec.git_auth
    if git_auth is not None:
        def selector(ref: stack_api.ResourceRef | None) -> dict[str, Any] | None:
            if ref is None or ref.secret is None:
                return None
            return {"name": ref.secret.name, "key": ref.secret.key}

        if git_auth.ssh_auth is not None:
            auth["sshPrivateKey"] = selector(git_auth.ssh_auth.ssh_private_key)
            if git_auth.ssh_auth.password is not None:
                auth["password"] = selector(git_auth.ssh_auth.password)
        elif git_auth.access_token is not None:
            auth["token"] = selector(git_auth.access_token)
        elif git_auth.github_app is not None:
            app = git_auth.github_app
            auth["githubApp"] = {"appID": selector(app.app_id), "installationID": selector(app.installation_id),
                                 "privateKey": selector(app.private_key)}
        elif git_auth.basic_auth is not None:
            auth["username"] = selector(git_auth.basic_auth.user_name)
            auth["password"] = selector(git_auth.basic_auth.password)
    auth = {k: v for k, v in auth.items() if v is not None}
    if auth:
        git["auth"] = auth
    return git


def validate_git(spec: stack_api.StackSpec) -> None:
    """The reference's checks of an inline git source (raise StallError)."""
    if not spec.project_repo:
        raise StallError('missing "projectRepo"')
    if not spec.commit and not spec.branch:
        raise StallError('missing "commit" or "branch"')
    if spec.commit and spec.branch:
        raise StallError('only one of "commit" or "branch" should be specified')
