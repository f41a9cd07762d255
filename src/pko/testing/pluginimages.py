"""Provider plugins packed as OCI images for `image` volumes, as a platform team publishes them, on the test node.

Why: pko's agent takes plugins from read-only volumes under ``/pulumi-plugins`` (:mod:`pko.agent.pluginmounts`,
docs/programs.md), and the cluster tier and the benchmarks need such images of the plugins `make tools` builds. An
image holds one plugin's folder as the CLI names it (``resource-random-v4.19.1/pulumi-resource-random``) and is
imported into the node's containerd — what a pull from the team's registry leaves there. The refs are under
``docker.io``, which the node never reaches (:data:`pko.testing.nodeconfig.BLOCKED_REGISTRIES`): a pod that finds
one missing fails at once, without a packet off the machine.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pko.testing import binaries, oci

#: Where a workspace mounts them (pko.agent.pluginmounts.DEFAULT_ROOT).
MOUNT_ROOT = "/pulumi-plugins"


class Node(Protocol):
    """What imports an image into the node's containerd (:class:`pko.testing.cluster.Cluster`)."""

    def import_image(self, archive: Path, refs: Sequence[str], key: str) -> bool: ...


@dataclass(frozen=True)
class PluginImage:
    """One resource plugin's image: the plugin's name and version, and its image ref."""

    name: str
    version: str

    @property
    def folder(self) -> str:
        """The CLI's name for the plugin's folder."""
        return f"resource-{self.name}-v{self.version}"

    @property
    def ref(self) -> str:
        return f"docker.io/pko-test/pulumi-plugin-{self.name}:{self.version}"

    @property
    def volume_name(self) -> str:
        return f"plugin-{self.name}"

    def write(self, work: Path) -> tuple[Path, str]:
        """The image as an OCI archive under `work`, and its manifest digest."""
        layer = work / f"{self.name}-layer.tar"
        binary = binaries.require(f"pulumi-resource-{self.name}")
        oci.write_files_layer(layer, [oci.ImageFile(f"/{self.folder}/{binary.name}", source=binary)])
        archive = work / f"{self.name}-image.tar"
        manifest = oci.write_image_archive(archive, [layer], oci.image_config([oci.sha256_file(layer)]), [self.ref])
        return archive, manifest.digest


def load(node: Node, plugins: Iterable[PluginImage]) -> None:
    """Build each plugin's image and import it into the node (skipped when the node has that very image)."""
    with tempfile.TemporaryDirectory(prefix="pko-plugin-images-") as tmp:
        for plugin in plugins:
            archive, digest = plugin.write(Path(tmp))
            node.import_image(archive, [plugin.ref], digest)


def pod_spec(plugins: Iterable[PluginImage], container: str = "pulumi") -> dict[str, Any]:
    """The part of a workspace's pod template that mounts each plugin's image read-only under :data:`MOUNT_ROOT`."""
    chosen = list(plugins)
    return {
        "volumes": [{"name": p.volume_name, "image": {"reference": p.ref, "pullPolicy": "IfNotPresent"}}
                    for p in chosen],
        "containers": [{"name": container, "volumeMounts": [
            {"name": p.volume_name, "mountPath": f"{MOUNT_ROOT}/{p.name}", "readOnly": True} for p in chosen]}],
    }
