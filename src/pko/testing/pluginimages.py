"""Provider plugins packed as OCI images for `image` volumes, as a platform team publishes them, on the test node.

Why: pko's agent takes plugins from read-only volumes under ``/pulumi-plugins`` (:mod:`pko.agent.pluginmounts`,
docs/programs.md), and the cluster tier and the benchmarks need such images of the plugins `make tools` builds. An
image holds one plugin's folder as the CLI names it (``resource-random-v4.19.1/pulumi-resource-random``) and is
pushed to the test bed's registry (:mod:`pko.testing.ociregistry`), which the node trusts
(:meth:`pko.testing.cluster.Cluster.trust_registry`): the kubelet pulls it when a pod mounts it, as from a team's
own registry, so a first cold start on the node pays that pull and what it leaves on the node serves the next pods.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pko.testing import binaries, oci, ociregistry

#: Where a workspace mounts them (pko.agent.pluginmounts.DEFAULT_ROOT).
MOUNT_ROOT = "/pulumi-plugins"
#: Where the images go in the registry (the plugin's name follows).
PREFIX = "pko-test/pulumi-plugin-"


@dataclass(frozen=True)
class PluginImage:
    """One resource plugin's image: the plugin's name and version, and where it was pushed (`registry`, ``host:port``,
    and the manifest's `digest`, which the ref pins, as production refs should)."""

    name: str
    version: str
    registry: str = ""
    digest: str = ""
    layers: tuple[oci.Descriptor, ...] = ()  # as pushed: what a pull fetches

    @property
    def folder(self) -> str:
        """The CLI's name for the plugin's folder."""
        return f"resource-{self.name}-v{self.version}"

    @property
    def repository(self) -> str:
        return f"{PREFIX}{self.name}"

    @property
    def ref(self) -> str:
        if not self.registry:
            raise ValueError(f"the {self.name} plugin's image has not been pushed")
        return f"{self.registry}/{self.repository}:{self.version}" + (f"@{self.digest}" if self.digest else "")

    @property
    def volume_name(self) -> str:
        return f"plugin-{self.name}"

    def layer(self, work: Path) -> Path:
        """The image's one layer, uncompressed, under `work`."""
        layer = work / f"{self.name}-layer.tar"
        binary = binaries.require(f"pulumi-resource-{self.name}")
        oci.write_files_layer(layer, [oci.ImageFile(f"/{self.folder}/{binary.name}", source=binary)])
        return layer


def push(registry: ociregistry.Registry, plugins: Iterable[PluginImage]) -> list[PluginImage]:
    """Build each plugin's image and push it to `registry`, tagged with the plugin's version; the images as pushed
    (their refs pinned to the digest)."""
    pushed = []
    with tempfile.TemporaryDirectory(prefix="pko-plugin-images-") as tmp:
        for plugin in plugins:
            layer = plugin.layer(Path(tmp))
            image = registry.push_image(plugin.repository, plugin.version, [layer],
                                        oci.image_config([oci.sha256_file(layer)]))
            pushed.append(dataclasses.replace(plugin, registry=registry.address, digest=image.digest,
                                              layers=image.layers))
            layer.unlink()
    return pushed


def pulled_bytes(registry: ociregistry.Registry, plugins: Iterable[PluginImage]) -> int:
    """The layer bytes `registry` has served of `plugins`' images so far (each fetch counted)."""
    total = 0
    for plugin in plugins:
        served = registry.served(plugin.repository)
        total += sum(layer.size * served.count(f"GET blobs/{layer.digest}") for layer in plugin.layers)
    return total


def pod_spec(plugins: Iterable[PluginImage], container: str = "pulumi") -> dict[str, Any]:
    """The part of a workspace's pod template that mounts each plugin's image read-only under :data:`MOUNT_ROOT`."""
    chosen = list(plugins)
    return {
        "volumes": [{"name": p.volume_name, "image": {"reference": p.ref, "pullPolicy": "IfNotPresent"}}
                    for p in chosen],
        "containers": [{"name": container, "volumeMounts": [
            {"name": p.volume_name, "mountPath": f"{MOUNT_ROOT}/{p.name}", "readOnly": True} for p in chosen]}],
    }
