"""The Service and StatefulSet that run a Workspace in a pod, built exactly as the Go operator builds them.

Why: users' existing `podTemplate` overrides, network policies and dashboards select on these names, labels,
container names, volumes and the agent command line, so they are part of the compatibility contract.

Pure: a Workspace model in, plain manifest dicts (built from typed models: :mod:`pko.kube.builtins`) out. Must
never read the environment or talk to the API server; operator settings (the agent image) come in as arguments.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pko.api import names
from pko.api import workspace as ws_api
from pko.kube import builtins, patchmeta, smp

PULUMI_CONTAINER = "pulumi"
SHARE_VOLUME = "share"
SHARE_MOUNT = "/share"
GRPC_PORT = 50051
GRACE_PERIOD_SECONDS = 600
DEFAULT_REQUESTS = {"cpu": "100m", "memory": "64Mi"}
PULL_POLICIES = {"always": "Always", "never": "Never", "ifnotpresent": "IfNotPresent"}

#: The fetch scripts; ``{agent}`` is the agent executable the init container runs (:meth:`AgentImage.in_fetch`).
_GIT_SCRIPT = (
    '\n{agent} init -t /share/source --git-url "$GIT_URL" --git-revision "$GIT_REVISION" &&\n'
    'ln -s "/share/source/$GIT_DIR" /share/workspace\n'
)
_FLUX_SCRIPT = (
    '\n{agent} init -t /share/source --flux-url "$FLUX_URL" --flux-digest "$FLUX_DIGEST" &&\n'
    'ln -s "/share/source/$FLUX_DIR" /share/workspace\n'
)
_LOCAL_SCRIPT = 'ln -s "$LOCAL_DIR" /share/workspace'
_PROJECT_SCRIPT = (
    '{agent} init -t /share/workspace --project-name "$PROJECT_NAME" --project-runtime "$PROJECT_RUNTIME"'
)
#: pko (:class:`ShareVolume`): before a new pod fetches its source into a kept share, the last pod's installed
#: ``node_modules`` is set aside (a rename on the same volume), for the agent to put back when the project's
#: package files are unchanged (:mod:`pko.agent.keptdeps`), and the last source is cleared.
KEPT_DIR = "/share/.kept"
_KEEP_SCRIPT = (
    f'mkdir -p {KEPT_DIR} && rm -rf {KEPT_DIR}/node_modules &&\n'
    f'if [ -d /share/workspace/node_modules ]; then mv /share/workspace/node_modules {KEPT_DIR}/; fi &&\n'
    'rm -rf /share/source /share/workspace &&'
)
#: pko (:attr:`AgentImage.volume` on a kept share): what earlier pods' `bootstrap` copied there (about 133 MB).
_DROP_COPIED_AGENT = "rm -rf /share/agent /share/tini /share/.pko-agent-* &&"
#: Where a kept share holds the package and build caches the toolchains keep in HOME, unless the workspace's own env
#: says otherwise (the agent keeps the CLI's plugins there too: pko.agent.keptdeps.keep_plugins).
KEPT_ENV = {
    "XDG_CACHE_HOME": "/share/.cache",  # Go's build cache, pip's cache
    "GOPATH": "/share/go",  # Go's module cache
    "npm_config_cache": "/share/.npm",
    "PKO_KEPT_DIR": KEPT_DIR,
}
_GIT_SECRET_ENV = (
    ("ssh_private_key", "GIT_SSH_PRIVATE_KEY"),
    ("username", "GIT_USERNAME"),
    ("password", "GIT_PASSWORD"),
    ("token", "GIT_TOKEN"),
)


DEFAULT_AGENT_REPOSITORY = "docker.io/pko/pko"


#: pko (:attr:`AgentImage.volume`): the agent image mounted read-only into the `pulumi` container.
AGENT_VOLUME = "pko-agent"
AGENT_MOUNT = "/pko-agent"


@dataclass(frozen=True)
class AgentImage:
    """The image the `bootstrap` and `fetch` init containers run (operator env `AGENT_IMAGE[_PULL_POLICY]`).

    Unset, it is pko's own image at the operator's version (the reference defaults to its own image the same
    way): that image carries the standalone agent at `/agent` and tini at `/tini`, and (pko) the agent's unpacked
    tree beside them, so that `/agent` runs at once wherever the image is.

    `volume` (pko, ``--workspace-agent-image-volume``): instead of a `bootstrap` container copying both into
    ``/share`` — where each pod then also unpacks the agent: ~130 MB written a pod — the `pulumi` container mounts
    the image read-only at :data:`AGENT_MOUNT` (a Kubernetes `image` volume) and runs them from there, and `fetch`
    runs the image's own `/agent`. One container start and every byte of the copy less a pod; needs image volumes
    (Kubernetes 1.35, or 1.33 to 1.34 with the `ImageVolume` gate) and an image that carries the unpacked tree."""

    image: str
    pull_policy: str = "IfNotPresent"
    volume: bool = False

    @classmethod
    def from_settings(cls, image: str | None, pull_policy: str | None, version: str,
                      volume: bool = False) -> AgentImage:
        policy = PULL_POLICIES.get((pull_policy or "").lower(), "IfNotPresent")
        return cls(image or f"{DEFAULT_AGENT_REPOSITORY}:{version}", policy, volume)

    @property
    def in_fetch(self) -> str:
        """The agent executable the `fetch` container runs: the copy in ``/share``, or the image's own."""
        return "/agent" if self.volume else f"{SHARE_MOUNT}/agent"

    @property
    def in_pulumi(self) -> str:
        """The folder the `pulumi` container finds `agent` and `tini` in."""
        return AGENT_MOUNT if self.volume else SHARE_MOUNT


@dataclass(frozen=True)
class ShareVolume:
    """pko (a Workspace's ``shareVolume``, the operator's ``--workspace-share-volume-size``): the workspace pod's
    ``/share`` on a PersistentVolumeClaim of the StatefulSet's instead of an emptyDir. What a pod installed — the
    npm tree, the plugins, the package and build caches — then outlives a sleep (scale-to-zero keeps the claim) and
    a pod's restart, so a wake does not install again. Unset, ``/share`` is an emptyDir, as with the Go
    operator."""

    size: str
    storage_class: str | None = None

    @classmethod
    def of(cls, spec: ws_api.WorkspaceSpec, default: ShareVolume | None) -> ShareVolume | None:
        """The volume `spec` asks for: its own ``shareVolume`` (size 0: none), else the operator's `default`."""
        own = spec.share_volume
        if own is None:
            return default
        if _zero(own.size):
            return None
        return cls(own.size, own.storage_class_name or (default.storage_class if default else None))

    def claim(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": self.size}}}
        if self.storage_class:
            spec["storageClassName"] = self.storage_class
        return {"metadata": {"name": SHARE_VOLUME}, "spec": spec}


def _zero(size: str) -> bool:
    try:
        return float(size.rstrip("KMGTPEik")) == 0
    except ValueError:
        return False


DEFAULT_IMAGES = {
    ws_api.SECURITY_PROFILE_RESTRICTED: ws_api.DEFAULT_IMAGE_RESTRICTED,
    ws_api.SECURITY_PROFILE_BASELINE: ws_api.DEFAULT_IMAGE_BASELINE,
}


def with_defaults(workspace: ws_api.Workspace) -> ws_api.WorkspaceSpec:
    """The spec with the Go defaulter's values filled in: image by security profile (none for a profile other than
    restricted or baseline: the StatefulSet is then refused, as with the Go operator), default resource requests."""
    spec = (workspace.spec or ws_api.WorkspaceSpec()).model_copy(deep=True)
    if not spec.image:
        spec.image = DEFAULT_IMAGES.get(spec.security_profile)
    resources = dict(spec.resources or {})
    if not resources.get("requests") and not resources.get("limits"):
        resources["requests"] = dict(DEFAULT_REQUESTS)
    spec.resources = resources
    return spec


def audience(workspace: ws_api.Workspace) -> str:
    """The token audience the agent accepts: `<workspace>.<namespace>`."""
    return f"{workspace.metadata.name}.{workspace.metadata.namespace}"


def service_address(workspace: ws_api.Workspace) -> str:
    """Where the operator dials the workspace pod's agent."""
    name = names.workspace_service_name(workspace.metadata.name or "")
    return f"{name}.{workspace.metadata.namespace}:{GRPC_PORT}"


def _source(spec: ws_api.WorkspaceSpec) -> dict[str, Any]:
    source: dict[str, Any] = {}
    if spec.git:
        source["git"] = spec.git.to_wire()
    if spec.flux:
        source["flux"] = spec.flux.to_wire()
    if spec.local:
        source["local"] = spec.local.to_wire()
    return source


def revision_hash(workspace: ws_api.Workspace, pod_generation: int | None = None) -> str:
    """Changes whenever the generation or the source changes, so the pod is replaced and re-initialised.

    `pod_generation` (pko, docs/config-without-restart.md) stands in for the Workspace's generation when the
    changes since that generation are config values only: the pod stays and the agent gets them by RPC."""
    spec = workspace.spec or ws_api.WorkspaceSpec()
    generation = (workspace.metadata.generation or 0) if pod_generation is None else pod_generation
    payload = {"generation": generation, **_source(spec)}
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.md5(canonical.encode(), usedforsecurity=False).hexdigest()


def pod_digest(workspace: ws_api.Workspace) -> str:
    """A digest of everything in the spec that needs a new pod when it changes: all of it but the values of
    `stacks[].config` (their keys and `path` flags stay in, so adding or removing a key still rolls the pod — the
    agent protocol cannot remove a config key) and pko's `idleTimeout` (scaling is not a new pod).

    The spec is readable by whoever reads this Workspace, so a digest of it in the status discloses nothing new."""
    spec = (workspace.spec or ws_api.WorkspaceSpec()).to_wire()
    spec.pop("idleTimeout", None)
    for stack in spec.get("stacks") or []:
        if "config" in stack:
            stack["config"] = [{"key": item.get("key"), "path": bool(item.get("path"))} for item in stack["config"]]
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def service(workspace: ws_api.Workspace) -> dict[str, Any]:
    """The headless Service that gives the workspace pod a stable DNS name."""
    name = workspace.metadata.name or ""
    system = names.workspace_component_labels(name)
    template = (workspace.spec.service_template if workspace.spec else None) or ws_api.ServiceTemplate()
    meta = template.metadata
    return builtins.headless_service(
        name=names.workspace_service_name(name), namespace=workspace.metadata.namespace,
        labels={**((meta.labels if meta else None) or {}), **system},
        annotations=meta.annotations if meta else None, selector=system, ports=[("grpc", GRPC_PORT)],
    )


def _init_container(name: str, agent: AgentImage, env: list[dict[str, Any]], args: list[str]) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name,
        "image": agent.image,
        "imagePullPolicy": agent.pull_policy,
        "volumeMounts": [{"name": SHARE_VOLUME, "mountPath": SHARE_MOUNT}],
        "args": args,
    }
    if env:
        container["env"] = env
    return container


def _fetch_container(
    spec: ws_api.WorkspaceSpec, agent: AgentImage, flux_max_untar: str | None, github_api_url: str | None = None,
    kept: bool = False,
) -> dict[str, Any] | None:
    container = _fetch(spec, agent, flux_max_untar, github_api_url)
    if container is not None and kept:
        # a local source is a folder of the image: nothing of it is set aside, only the last link cleared
        local = spec.local and not (spec.git or spec.flux)
        prefix = "rm -f /share/workspace &&" if local else _KEEP_SCRIPT
        if agent.volume:  # the copies pods made before the agent came from the image are dead weight on the claim
            prefix = _DROP_COPIED_AGENT + "\n" + prefix
        container["args"][-1] = prefix + "\n" + container["args"][-1].lstrip("\n")
    return container


def _fetch(
    spec: ws_api.WorkspaceSpec, agent: AgentImage, flux_max_untar: str | None, github_api_url: str | None = None,
) -> dict[str, Any] | None:
    if spec.git:
        git = spec.git
        env: list[dict[str, Any]] = [
            {"name": "GIT_URL", "value": git.url or ""},
            {"name": "GIT_REVISION", "value": git.ref or ""},
            {"name": "GIT_DIR", "value": git.dir or ""},
        ]
        if git.shallow:
            env.append({"name": "GIT_SHALLOW", "value": "true"})
        auth = git.auth
        if auth:
            for field, var in _GIT_SECRET_ENV:
                selector = getattr(auth, field)
                if selector is not None:
                    env.append({"name": var, "valueFrom": {"secretKeyRef": selector}})
            if auth.github_app:
                app = auth.github_app
                for var, selector in (("GIT_GITHUB_APP_ID", app.app_id),
                                      ("GIT_GITHUB_APP_INSTALLATION_ID", app.installation_id),
                                      ("GIT_GITHUB_APP_PRIVATE_KEY", app.private_key)):
                    env.append({"name": var, "valueFrom": {"secretKeyRef": selector}})
                if github_api_url:  # pko: GitHub Enterprise Server (--github-api-url); unset, github.com's
                    env.append({"name": "GIT_GITHUB_APP_API_URL", "value": github_api_url})
        return _init_container("fetch", agent, env, ["sh", "-c", _GIT_SCRIPT.format(agent=agent.in_fetch)])
    if spec.flux:
        env = [
            {"name": "FLUX_URL", "value": spec.flux.url or ""},
            {"name": "FLUX_DIGEST", "value": spec.flux.digest or ""},
            {"name": "FLUX_DIR", "value": spec.flux.dir or ""},
        ]
        if flux_max_untar:
            env.append({"name": "FLUX_MAX_UNTAR_SIZE_BYTES", "value": flux_max_untar})
        return _init_container("fetch", agent, env, ["sh", "-c", _FLUX_SCRIPT.format(agent=agent.in_fetch)])
    if spec.local:
        env = [{"name": "LOCAL_DIR", "value": spec.local.dir or ""}]
        return _init_container("fetch", agent, env, ["sh", "-c", _LOCAL_SCRIPT])
    if spec.project_info:
        env = [
            {"name": "PROJECT_NAME", "value": spec.project_info.name},
            {"name": "PROJECT_RUNTIME", "value": spec.project_info.runtime},
        ]
        return _init_container("fetch", agent, env, ["sh", "-c", _PROJECT_SCRIPT.format(agent=agent.in_fetch)])
    return None


def agent_command(workspace: ws_api.Workspace, spec: ws_api.WorkspaceSpec, folder: str = SHARE_MOUNT) -> list[str]:
    """The `pulumi` container's command: tini running the agent in kube auth mode for this workspace (both found in
    `folder`: :attr:`AgentImage.in_pulumi`)."""
    command = [
        f"{folder}/tini", f"{folder}/agent", "--", "serve",
        "--workspace", "/share/workspace",
        "--skip-install",
        "--env-file", "/share/.env",
        "--auth-mode", "kube",
        "--kube-audience", audience(workspace),
        "--kube-workspace-namespace", workspace.metadata.namespace or "",
        "--kube-workspace-name", workspace.metadata.name or "",
    ]
    if spec.pulumi_log_level:
        command += ["--pulumi-log-level", str(spec.pulumi_log_level)]
    return command


def without_bootstrap(patch: dict[str, Any]) -> dict[str, Any]:
    """A pod template patch without what it says of the `bootstrap` init container (pko, :attr:`AgentImage.volume`:
    the pod has none). Merged as it is, a patch that sets, say, that container's resources for a namespace's quota
    would add an init container with no image, and the API server would refuse every StatefulSet of the workspace."""
    spec = patch.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("initContainers"), list):
        return patch
    kept = [c for c in spec["initContainers"] if not (isinstance(c, dict) and c.get("name") == "bootstrap")]
    return {**patch, "spec": {**spec, "initContainers": kept}}


def _restrict(pod_spec: dict[str, Any], kept: bool = False) -> None:
    pod_spec["securityContext"].update(runAsNonRoot=True, runAsUser=1000, runAsGroup=1000)
    if kept:  # a claimed volume's root may belong to root: the group makes it writable, checked once per mount
        pod_spec["securityContext"].update(fsGroup=1000, fsGroupChangePolicy="OnRootMismatch")
    for container in [*pod_spec["initContainers"], *pod_spec["containers"]]:
        context = container.setdefault("securityContext", {})
        context["allowPrivilegeEscalation"] = False
        context["capabilities"] = {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}


def statefulset(
    workspace: ws_api.Workspace, agent: AgentImage, *, flux_max_untar: str | None = None,
    replicas: int = 1, pod_generation: int | None = None, default_env: Mapping[str, str] | None = None,
    github_api_url: str | None = None, carried: Mapping[str, str] | None = None, volume: ShareVolume | None = None,
) -> dict[str, Any]:
    """The single-replica StatefulSet whose pod runs the agent on the workspace's project (pko: `replicas` 0 for
    a sleeping workspace, `pod_generation` for the revision hash: see :func:`revision_hash`; `default_env` the
    operator's variables, such as the dependency cache's, for those the workspace's own env does not set;
    `github_api_url` where a GitHub App's installation token is asked for, when not github.com's; `carried` the
    Workspace's labels the operator's watch selector looks at, on the StatefulSet only — never its selector or pod
    template, so a shard move relabels it in place and restarts nothing: pko.runtime.sharding; `volume` the
    operator's default claimed ``/share`` instead of an emptyDir, which the Workspace's own ``shareVolume`` overrides:
    :class:`ShareVolume`)."""
    name = workspace.metadata.name or ""
    spec = with_defaults(workspace)
    volume = ShareVolume.of(spec, volume)
    labels = names.workspace_component_labels(name)
    env = [dict(item) for item in spec.env or []]
    own = {item.get("name") for item in env}
    env += [{"name": var, "value": value} for var, value in sorted((default_env or {}).items()) if var not in own]
    if volume is not None:
        env += [{"name": var, "value": value} for var, value in KEPT_ENV.items() if var not in own]
    env += [
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_SA_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
        {"name": "AGENT_MEMLIMIT",
         "valueFrom": {"resourceFieldRef": {"containerName": PULUMI_CONTAINER, "resource": "requests.memory"}}},
    ]
    pulumi: dict[str, Any] = {
        "name": PULUMI_CONTAINER,
        "image": spec.image,
        "resources": spec.resources,
        "volumeMounts": [{"name": SHARE_VOLUME, "mountPath": SHARE_MOUNT}],
        "ports": [{"name": "grpc", "containerPort": GRPC_PORT}],
        "env": env,
        "command": agent_command(workspace, spec, agent.in_pulumi),
        "workingDir": "/share/workspace",
    }
    if spec.image_pull_policy:
        pulumi["imagePullPolicy"] = spec.image_pull_policy
    if spec.env_from:
        pulumi["envFrom"] = [dict(item) for item in spec.env_from]
    volumes: list[dict[str, Any]] = [] if volume is not None else [{"name": SHARE_VOLUME, "emptyDir": {}}]
    if agent.volume:
        init = []
        pulumi["volumeMounts"].append({"name": AGENT_VOLUME, "mountPath": AGENT_MOUNT, "readOnly": True})
        volumes.append({"name": AGENT_VOLUME, "image": {"reference": agent.image, "pullPolicy": agent.pull_policy}})
    else:
        init = [_init_container("bootstrap", agent, [], ["cp", "/agent", "/tini", "/share/"])]
    fetch = _fetch_container(spec, agent, flux_max_untar, github_api_url, kept=volume is not None)
    if fetch:
        init.append(fetch)
    pod_spec: dict[str, Any] = {
        "serviceAccountName": spec.service_account_name,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "terminationGracePeriodSeconds": GRACE_PERIOD_SECONDS,
        "initContainers": init,
        "containers": [pulumi],
        "volumes": volumes,
    }
    if spec.security_profile == ws_api.SECURITY_PROFILE_RESTRICTED:
        _restrict(pod_spec, kept=volume is not None)
    template: dict[str, Any] = {
        "metadata": {"labels": dict(labels), "annotations": {
            names.ANNOTATION_REVISION_HASH: revision_hash(workspace, pod_generation)}},
        "spec": pod_spec,
    }
    if spec.pod_template:
        # System init containers stay first; the user's are appended (the reference's $setElementOrder).
        patch = spec.pod_template.to_wire()
        if agent.volume:
            patch = without_bootstrap(patch)
        template = smp.merge(template, patch, patchmeta.POD_TEMPLATE_SPEC)
    for container in [*template["spec"].get("initContainers", []), *template["spec"].get("containers", [])]:
        container.setdefault("env", []).append({"name": "PULUMI_ENV", "value": "/share/.env"})
    return builtins.statefulset(
        name=names.workspace_statefulset_name(name), namespace=workspace.metadata.namespace,
        labels={**(carried or {}), **labels}, selector=labels, service_name=names.workspace_service_name(name),
        replicas=replicas, pod_management_policy="Parallel", template=template,
        claims=[volume.claim()] if volume is not None else (),
    )
