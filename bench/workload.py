"""What each benchmark Stack runs (`python -m bench --program`): the small YAML Program that downloads nothing
(`yaml`, the default), or a realistic program (`typescript`): a TypeScript program with `@pulumi/random` and
`@pulumi/kubernetes` from Git (:func:`programs.typescript_kubernetes`: a ConfigMap and a Deployment that the provider
waits for, in the Stack's namespace, through the workspace account's RBAC) with its `package-lock.json`, as users
commit it, whose workspace installs its packages from the npm mirror and whose Pulumi CLI downloads both provider
plugins from the plugin mirror, as a user's pod does (:mod:`pko.testing.mirror`, :mod:`pko.testing.programs`).

Both operators get the same Stacks: the same repository (over https, the git server's CA mounted as a user mounts a
private CA), the same mirrors, the same pod requests. The mirror counts what it serves, so a scenario can report how
many plugin bytes the pods pulled. One difference, the point of pko's dependency cache: when the operator runs it
(:attr:`Realistic.through_cache`, pko unless `--without-dependency-cache`), its Stacks do not name the mirrors —
the platform set them once, as the cache's upstreams, and the operator points every pod at its cache. Another, with
`--plugin-images` (:attr:`Realistic.through_plugin_images`, pko only): its Stacks mount both plugins from `image`
volumes (:mod:`pko.testing.pluginimages`), which the node's kubelet pulls from the bench's registry when a pod first
mounts them (:attr:`Realistic.plugin_images`: the images as pushed; a scenario that measures a first start removes
them from the node first), so its pods download and unpack no plugin (docs/programs.md, "Plugins from image
volumes").
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import (
    cluster,
    crossrun,
    gitserver,
    mirror,
    nodeconfig,
    objectstore,
    ociregistry,
    pluginimages,
    programs,
)
from pko.testing.clusterbed import (
    CA_CONFIGMAP,
    WORKSPACE_SERVICE_ACCOUNT,
    dependency_cache_values,
    mirror_env,
    passphrase_env,
)

EDIT_BINDING = "bench-workspace-edit"
ROLE_BINDING = resources.register(resources.Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"))

PROGRAMS = ("yaml", "typescript")
#: The realistic program's plugins as images, for `--plugin-images`.
PLUGIN_IMAGES = (pluginimages.PluginImage("random", programs.RANDOM_VERSION),
                 pluginimages.PluginImage("kubernetes", programs.KUBERNETES_VERSION))
@dataclass
class Realistic:
    """The TypeScript program from Git, with its packages and plugin from the mirror."""

    git: gitserver.GitServer
    registry: mirror.Mirror
    cpu: str
    store: objectstore.ObjectStore  # the fleet's one backend: a bucket, a stack per Stack in each namespace
    through_cache: bool = False  # the operator under test serves the mirrors through its dependency cache
    through_plugin_images: bool = False  # the Stacks mount the plugins from image volumes (plugin_images)
    plugin_images: Sequence[pluginimages.PluginImage] = ()  # PLUGIN_IMAGES as pushed to the bench's registry
    images_registry: ociregistry.Registry | None = None  # where they were pushed
    _repo: str = field(default="bench/tsprog")
    _made: bool = field(default=False)

    def __post_init__(self) -> None:
        self._ensure_repo()  # npm resolves the lockfile here (once per filled mirror), never inside a timed scenario

    def _ensure_repo(self) -> str:
        if not self._made:
            files = programs.typescript_kubernetes("tsprog")
            files["package-lock.json"] = mirror.npm_lockfile(self.registry, files)  # as users commit it
            self.git.create_repo(self._repo, files)
            self._made = True
        return self.git.https_url(self._repo)

    def stack_spec(self, name: str, namespace: str, greeting: str = "hello") -> dict[str, Any]:
        template = crossrun.trusting_workspace_template()
        template["spec"]["resources"] = {"requests": {"cpu": self.cpu, "memory": "256Mi"}}
        env = {**passphrase_env(), **({} if self.through_cache else mirror_env(self.registry)),
               **{key: {"type": "Literal", "literal": {"value": value}} for key, value in self.store.env().items()}}
        config = {"greeting": greeting, "namespace": namespace, "app": name, "image": nodeconfig.PAUSE_IMAGE,
                  "kubernetes:enableConfigMapMutable": "true"}  # a new greeting updates the ConfigMap in place
        if self.through_plugin_images:
            pod, plugins = template["spec"]["podTemplate"]["spec"], pluginimages.pod_spec(self.plugin_images)
            pod["volumes"] += plugins["volumes"]
            pulumi = next(c for c in pod["containers"] if c["name"] == "pulumi")
            pulumi["volumeMounts"] += plugins["containers"][0]["volumeMounts"]
        # the state outlives the pod (a new commit, a wake from scale-to-zero), as a real fleet's does
        return {"stack": name, "projectRepo": self._ensure_repo(), "branch": "main",
                "backend": self.store.backend_url(namespace),
                "envRefs": env, "config": config, "workspaceTemplate": template}

    async def create(self, kc: kclient.Client, namespace: str, names: Iterable[str]) -> None:
        if not await kc.get_or_none(resources.CONFIG_MAP, CA_CONFIGMAP, namespace):
            await crossrun.trust_git_ca(kc, namespace, self.git)
        if not await kc.get_or_none(ROLE_BINDING, EDIT_BINDING, namespace):
            # the workspace account may manage the namespace's objects, as a user grants it for such a program
            await kc.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                             "metadata": {"name": EDIT_BINDING, "namespace": namespace},
                             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                         "name": "edit"},
                             "subjects": [{"kind": "ServiceAccount", "name": WORKSPACE_SERVICE_ACCOUNT,
                                           "namespace": namespace}]})
        await asyncio.gather(*(kc.create(resources.STACK.new(name, namespace, spec=self.stack_spec(name, namespace)))
                               for name in names))

    def fresh_node(self, node: cluster.Cluster) -> None:
        """Before a scenario that measures a first start, with the Stacks mounting the plugins' images: the node
        forgets them, so the first pod that mounts them pulls them, as on a node that never ran one."""
        if self.through_plugin_images:
            node.remove_images(image.digest for image in self.plugin_images)

    def plugin_image_megabytes(self) -> float:
        """The plugins' image layers the node has pulled from the registry so far."""
        if self.images_registry is None:
            return 0.0
        return pluginimages.pulled_bytes(self.images_registry, self.plugin_images) / 1e6

    def plugin_megabytes(self) -> float:
        return self.registry.served("plugins") / 1e6

    def npm_megabytes(self) -> float:
        return self.registry.served("npm") / 1e6

    def operator_values(self) -> list[str]:
        """Chart values for the operator under test: the dependency cache with the mirrors as upstreams."""
        return dependency_cache_values(self.registry) if self.through_cache else []
