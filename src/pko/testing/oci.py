"""OCI image archives written and read without a registry or a container tool.

The test cluster's containerd imports images from OCI image-layout tarballs (`ctr -n k8s.io images import`), and
names an image only by the ``io.containerd.image.name`` annotation of its index entry. This module writes such
archives for the images that are a few files or a root filesystem tarball (pause, coredns, the Python base), and
re-packs the OCI layout directory buildah pushes (pko, workspace, pko-go) so every archive carries one annotated
index entry per image ref. The layers written here stay uncompressed (the archives never leave this machine; buildah
gzips its own). Everything written is deterministic: the same inputs give the same bytes, and so the same digests.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
MEDIA_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
CONTAINERD_NAME = "io.containerd.image.name"
REF_NAME = "org.opencontainers.image.ref.name"
# A fixed creation time keeps configs (and so image digests) the same for the same inputs.
EPOCH = "1970-01-01T00:00:00Z"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_CHUNK = 1 << 20


class ArchiveError(ValueError):
    """An archive (or layout directory) that is not a well-formed OCI image layout."""


@dataclass(frozen=True)
class Descriptor:
    """A content descriptor: what a blob is, its digest (``sha256:<hex>``) and size."""

    media_type: str
    digest: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}

    @property
    def blob_name(self) -> str:
        """The blob's path inside an image layout."""
        algorithm, _, hexdigest = self.digest.partition(":")
        return f"blobs/{algorithm}/{hexdigest}"


@dataclass(frozen=True)
class ImageFile:
    """A file to put into a layer: its absolute path in the image, and either a host file or inline bytes."""

    path: str
    source: Path | None = None
    data: bytes | None = None
    mode: int = 0o755

    def __post_init__(self) -> None:
        if (self.source is None) == (self.data is None):
            raise ValueError(f"{self.path}: give exactly one of source and data")
        if not self.path.startswith("/"):
            raise ValueError(f"{self.path}: an image path must be absolute")


@dataclass(frozen=True)
class ArchiveInfo:
    """What an archive holds: its image refs (index order), manifest, config and layer descriptors."""

    refs: tuple[str, ...]
    manifest: Descriptor
    config: Mapping[str, Any]
    layers: tuple[Descriptor, ...]


def sha256_file(path: Path) -> str:
    """``sha256:<hex>`` of a file's content."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical_json(obj: Any) -> bytes:
    """The bytes a JSON blob is stored as: sorted keys, no whitespace, so equal objects have equal digests."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def architecture() -> str:
    """This machine's architecture in OCI (Go) spelling."""
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)


def _normalized(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    return info


def write_files_layer(out: Path, files: Iterable[ImageFile]) -> None:
    """A deterministic uncompressed layer holding `files` (root-owned, mtime 0) and their parent directories."""
    entries = sorted(files, key=lambda f: f.path)
    paths = [PurePosixPath(f.path) for f in entries]
    if len(set(paths)) != len(paths):
        raise ValueError("a layer cannot hold the same path twice")
    directories = sorted({str(parent) for p in paths for parent in p.parents if str(parent) != "/"})
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for directory in directories:
            info = _normalized(tarfile.TarInfo(directory.lstrip("/")))
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
        for entry in entries:
            info = _normalized(tarfile.TarInfo(entry.path.lstrip("/")))
            info.mode = entry.mode
            if entry.source is not None:
                info.size = entry.source.stat().st_size
                with entry.source.open("rb") as f:
                    tar.addfile(info, f)
            else:
                assert entry.data is not None
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))


def write_rootfs_layer(out: Path, rootfs: Path, drop: Sequence[str] = ()) -> None:
    """A layer from a root filesystem tarball (e.g. mmdebstrap's), without device nodes and FIFOs.

    A container runtime provides /dev itself, and a device node in a layer only fails to unpack where mknod is not
    allowed. Members whose path (without a leading ``./``) is in `drop` are left out as well.
    """
    dropped = {p.strip("/") for p in drop}
    with tarfile.open(rootfs, "r:*") as src, tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as dst:
        for member in src:
            if member.ischr() or member.isblk() or member.isfifo():
                continue
            name = member.name[2:] if member.name.startswith("./") else member.name
            if name.strip("/") in dropped:
                continue
            if member.isreg():
                data = src.extractfile(member)
                dst.addfile(member, data)
            else:
                dst.addfile(member)


def image_config(
    diff_ids: Sequence[str],
    *,
    entrypoint: Sequence[str] | None = None,
    cmd: Sequence[str] | None = None,
    env: Sequence[str] = (f"PATH={DEFAULT_PATH}",),
    user: str = "",
    workdir: str = "/",
    exposed_ports: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
    created_by: str = "pko.testing.oci",
) -> dict[str, Any]:
    """An OCI image configuration for a linux image of this machine's architecture."""
    config: dict[str, Any] = {"Env": list(env), "WorkingDir": workdir}
    if entrypoint is not None:
        config["Entrypoint"] = list(entrypoint)
    if cmd is not None:
        config["Cmd"] = list(cmd)
    if user:
        config["User"] = user
    if exposed_ports:
        config["ExposedPorts"] = {port: {} for port in exposed_ports}
    if labels:
        config["Labels"] = dict(labels)
    return {
        "created": EPOCH,
        "architecture": architecture(),
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": list(diff_ids)},
        "history": [{"created": EPOCH, "created_by": created_by} for _ in diff_ids],
    }


def index_json(manifest: Descriptor, refs: Sequence[str], arch: str) -> dict[str, Any]:
    """The layout's index: the same manifest once per ref, each named for containerd and for OCI tools."""
    if not refs:
        raise ValueError("an image archive needs at least one ref")
    return {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [
            {
                **manifest.to_json(),
                "platform": {"architecture": arch, "os": "linux"},
                "annotations": {CONTAINERD_NAME: ref, REF_NAME: ref},
            }
            for ref in refs
        ],
    }


def _blob_info(name: str, size: int) -> tarfile.TarInfo:
    info = _normalized(tarfile.TarInfo(name))
    info.mode = 0o644
    info.size = size
    return info


def _write_layout_tar(
    out: Path, index: Mapping[str, Any], blobs: Sequence[tuple[Descriptor, Path | bytes]]
) -> None:
    """Write the archive next to `out` and rename it into place, so a killed write never leaves a whole-looking one."""
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    try:
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
            layout = canonical_json({"imageLayoutVersion": "1.0.0"})
            tar.addfile(_blob_info("oci-layout", len(layout)), io.BytesIO(layout))
            data = canonical_json(index)
            tar.addfile(_blob_info("index.json", len(data)), io.BytesIO(data))
            for directory in ("blobs", "blobs/sha256"):
                info = _normalized(tarfile.TarInfo(directory))
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            seen: set[str] = set()
            for descriptor, content in blobs:
                if descriptor.digest in seen:
                    continue
                seen.add(descriptor.digest)
                info = _blob_info(descriptor.blob_name, descriptor.size)
                if isinstance(content, bytes):
                    tar.addfile(info, io.BytesIO(content))
                else:
                    with content.open("rb") as f:
                        tar.addfile(info, f)
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)


def write_image_archive(
    out: Path, layers: Sequence[Path], config: Mapping[str, Any], refs: Sequence[str]
) -> Descriptor:
    """Write an image of uncompressed `layers` (bottom first) and `config` as an OCI archive; returns its manifest.

    The config's ``rootfs.diff_ids`` are set from the layers here.
    """
    layer_descriptors = [Descriptor(MEDIA_LAYER, sha256_file(p), p.stat().st_size) for p in layers]
    full_config = dict(config)
    full_config["rootfs"] = {"type": "layers", "diff_ids": [d.digest for d in layer_descriptors]}
    config_bytes = canonical_json(full_config)
    config_descriptor = Descriptor(MEDIA_CONFIG, sha256_bytes(config_bytes), len(config_bytes))
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": config_descriptor.to_json(),
        "layers": [d.to_json() for d in layer_descriptors],
    }
    manifest_bytes = canonical_json(manifest)
    manifest_descriptor = Descriptor(MEDIA_MANIFEST, sha256_bytes(manifest_bytes), len(manifest_bytes))
    blobs: list[tuple[Descriptor, Path | bytes]] = [
        (manifest_descriptor, manifest_bytes),
        (config_descriptor, config_bytes),
        *zip(layer_descriptors, layers, strict=True),
    ]
    _write_layout_tar(out, index_json(manifest_descriptor, refs, str(full_config["architecture"])), blobs)
    return manifest_descriptor


def _descriptor(obj: Mapping[str, Any]) -> Descriptor:
    try:
        return Descriptor(str(obj["mediaType"]), str(obj["digest"]), int(obj["size"]))
    except (KeyError, TypeError, ValueError) as err:
        raise ArchiveError(f"malformed descriptor {obj!r}") from err


def repack_layout(layout: Path, out: Path, refs: Sequence[str]) -> Descriptor:
    """Re-pack an OCI layout directory holding one image (``buildah push IMAGE oci:DIR``) as an archive for `refs`.

    Every blob is checked against its digest on the way, so a truncated push cannot become a cached image.
    """
    index = json.loads((layout / "index.json").read_text())
    manifests = index.get("manifests", [])
    if len(manifests) != 1:
        raise ArchiveError(f"{layout}: expected one image in the layout, found {len(manifests)}")
    manifest_descriptor = _descriptor(manifests[0])
    if manifest_descriptor.media_type != MEDIA_MANIFEST:
        raise ArchiveError(f"{layout}: not an OCI image manifest: {manifest_descriptor.media_type}")

    def blob(descriptor: Descriptor) -> Path:
        path = layout / descriptor.blob_name
        if not path.is_file() or path.stat().st_size != descriptor.size or sha256_file(path) != descriptor.digest:
            raise ArchiveError(f"{layout}: blob {descriptor.digest} is missing or does not match its digest")
        return path

    manifest_path = blob(manifest_descriptor)
    manifest = json.loads(manifest_path.read_text())
    config_descriptor = _descriptor(manifest["config"])
    config = json.loads(blob(config_descriptor).read_text())
    blobs: list[tuple[Descriptor, Path | bytes]] = [
        (manifest_descriptor, manifest_path),
        (config_descriptor, layout / config_descriptor.blob_name),
    ]
    blobs += [(d, blob(d)) for d in map(_descriptor, manifest["layers"])]
    arch = str(config.get("architecture", architecture()))
    _write_layout_tar(out, index_json(manifest_descriptor, refs, arch), blobs)
    return manifest_descriptor


def read_archive(path: Path, verify: bool = True) -> ArchiveInfo:
    """Read an archive's index, manifest and config; with `verify`, check every blob against its digest and size.

    Raises ArchiveError when the layout is incomplete, an index entry has no ``io.containerd.image.name``, the
    entries name different manifests, or a blob does not match its descriptor.
    """
    with tarfile.open(path, "r:") as tar:
        members = {m.name.removeprefix("./"): m for m in tar.getmembers() if m.isfile()}

        def read(name: str) -> bytes:
            member = members.get(name)
            f = tar.extractfile(member) if member is not None else None
            if f is None:
                raise ArchiveError(f"{path}: {name} is missing")
            return f.read()

        def check(descriptor: Descriptor) -> None:
            member = members.get(descriptor.blob_name)
            if member is None:
                raise ArchiveError(f"{path}: blob {descriptor.digest} is missing")
            if member.size != descriptor.size:
                raise ArchiveError(f"{path}: blob {descriptor.digest} has size {member.size}, not {descriptor.size}")
            if verify:
                f = tar.extractfile(member)
                assert f is not None
                digest = hashlib.sha256()
                while chunk := f.read(_CHUNK):
                    digest.update(chunk)
                if "sha256:" + digest.hexdigest() != descriptor.digest:
                    raise ArchiveError(f"{path}: blob {descriptor.digest} does not match its digest")

        if json.loads(read("oci-layout")).get("imageLayoutVersion") != "1.0.0":
            raise ArchiveError(f"{path}: unknown oci-layout version")
        index = json.loads(read("index.json"))
        entries = index.get("manifests") or []
        if not entries:
            raise ArchiveError(f"{path}: index.json names no image")
        refs: list[str] = []
        for entry in entries:
            name = (entry.get("annotations") or {}).get(CONTAINERD_NAME)
            if not name:
                raise ArchiveError(f"{path}: an index entry has no {CONTAINERD_NAME} annotation")
            refs.append(str(name))
        manifest_descriptor = _descriptor(entries[0])
        if any(_descriptor(e) != manifest_descriptor for e in entries):
            raise ArchiveError(f"{path}: the index entries name different manifests")
        check(manifest_descriptor)
        manifest = json.loads(read(manifest_descriptor.blob_name))
        config_descriptor = _descriptor(manifest["config"])
        check(config_descriptor)
        config = json.loads(read(config_descriptor.blob_name))
        layers = tuple(_descriptor(layer) for layer in manifest["layers"])
        for layer in layers:
            check(layer)
        if len(config.get("rootfs", {}).get("diff_ids", [])) != len(layers):
            raise ArchiveError(f"{path}: the config's diff_ids do not match the manifest's layers")
    return ArchiveInfo(tuple(refs), manifest_descriptor, config, layers)

