"""OCI image archives as containerd imports them: layout, index annotations, blob digests, deterministic bytes."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from pko.testing import oci


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        out = {}
        for member in tar.getmembers():
            if member.isfile():
                f = tar.extractfile(member)
                assert f is not None
                out[member.name] = f.read()
        return out


def _files_archive(tmp_path: Path, refs: tuple[str, ...] = ("registry.example/a/b:1",), name: str = "a") -> Path:
    binary = tmp_path / f"{name}.bin"
    binary.write_bytes(b"\x7fELF pretend executable")
    layer = tmp_path / f"{name}-layer.tar"
    oci.write_files_layer(layer, [oci.ImageFile("/bin/tool", source=binary), oci.ImageFile("/etc/x", data=b"x\n")])
    config = oci.image_config([oci.sha256_file(layer)], entrypoint=["/bin/tool"], user="65535:65535")
    archive = tmp_path / f"{name}.tar"
    oci.write_image_archive(archive, [layer], config, refs)
    return archive


def test_archive_layout_index_and_blob_digests(tmp_path: Path) -> None:
    refs = ("registry.k8s.io/pause:3.10.1", "docker.io/x/pause:abc")
    members = _members(_files_archive(tmp_path, refs))

    assert json.loads(members["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(members["index.json"])
    assert index["schemaVersion"] == 2
    entries = index["manifests"]
    assert [e["annotations"]["io.containerd.image.name"] for e in entries] == list(refs)
    assert [e["annotations"]["org.opencontainers.image.ref.name"] for e in entries] == list(refs)
    assert {e["digest"] for e in entries} == {entries[0]["digest"]}
    assert entries[0]["mediaType"] == oci.MEDIA_MANIFEST
    for name, data in members.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]

    manifest = json.loads(members["blobs/sha256/" + entries[0]["digest"].split(":")[1]])
    assert len(members["blobs/sha256/" + entries[0]["digest"].split(":")[1]]) == entries[0]["size"]
    config = json.loads(members["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    assert config["config"]["Entrypoint"] == ["/bin/tool"]
    assert config["config"]["User"] == "65535:65535"
    assert config["os"] == "linux"
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == oci.MEDIA_LAYER
    # Uncompressed layers: the diff_id is the layer's own digest.
    assert config["rootfs"]["diff_ids"] == [layer["digest"]]

    with tarfile.open(fileobj=io.BytesIO(members["blobs/sha256/" + layer["digest"].split(":")[1]])) as tar:
        listing = {m.name: m for m in tar.getmembers()}
    assert sorted(listing) == ["bin", "bin/tool", "etc", "etc/x"]
    assert listing["bin"].isdir()
    assert listing["bin/tool"].mode == 0o755
    assert all(m.uid == 0 and m.mtime == 0 for m in listing.values())


def test_same_inputs_give_the_same_bytes(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    first = _files_archive(tmp_path / "one")
    second = _files_archive(tmp_path / "two")
    assert first.read_bytes() == second.read_bytes()


def test_read_archive_verifies_blobs(tmp_path: Path) -> None:
    archive = _files_archive(tmp_path, ("docker.io/pko/pko:dev",))
    info = oci.read_archive(archive)
    assert info.refs == ("docker.io/pko/pko:dev",)
    assert info.config["config"]["Entrypoint"] == ["/bin/tool"]
    assert len(info.layers) == 1

    # A layer whose bytes no longer match its digest (same size) must be refused.
    members = _members(archive)
    layer_name = info.layers[0].blob_name
    data = bytearray(members[layer_name])
    data[-1] ^= 0xFF
    members[layer_name] = bytes(data)
    broken = tmp_path / "broken.tar"
    with tarfile.open(broken, "w") as tar:
        for name, content in members.items():
            info_ = tarfile.TarInfo(name)
            info_.size = len(content)
            tar.addfile(info_, io.BytesIO(content))
    with pytest.raises(oci.ArchiveError, match="does not match its digest"):
        oci.read_archive(broken)


def test_read_archive_requires_the_containerd_name(tmp_path: Path) -> None:
    members = _members(_files_archive(tmp_path))
    index = json.loads(members["index.json"])
    del index["manifests"][0]["annotations"]["io.containerd.image.name"]
    members["index.json"] = json.dumps(index).encode()
    unnamed = tmp_path / "unnamed.tar"
    with tarfile.open(unnamed, "w") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    with pytest.raises(oci.ArchiveError, match=r"io\.containerd\.image\.name"):
        oci.read_archive(unnamed)


def test_repack_layout_renames_and_checks(tmp_path: Path) -> None:
    # An OCI layout directory as `buildah push IMAGE oci:DIR` leaves it: one unnamed image.
    archive = _files_archive(tmp_path)
    layout = tmp_path / "layout"
    with tarfile.open(archive) as tar:
        tar.extractall(layout, filter="data")
    index = json.loads((layout / "index.json").read_text())
    del index["manifests"][0]["annotations"]
    (layout / "index.json").write_text(json.dumps(index))

    out = tmp_path / "repacked.tar"
    refs = ("docker.io/pulumi/pulumi:3.259.0-nonroot", "docker.io/pulumi/pulumi:latest-nonroot")
    manifest = oci.repack_layout(layout, out, refs)
    info = oci.read_archive(out)
    assert info.refs == refs
    assert info.manifest == manifest
    assert info.manifest.digest == index["manifests"][0]["digest"]

    # A truncated blob in the layout is refused, not cached.
    blob = layout / info.layers[0].blob_name
    blob.write_bytes(blob.read_bytes()[:-1])
    with pytest.raises(oci.ArchiveError, match="missing or does not match"):
        oci.repack_layout(layout, tmp_path / "again.tar", refs)
    assert not (tmp_path / "again.tar").exists()


def test_rootfs_layer_drops_device_nodes(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs.tar"
    with tarfile.open(rootfs, "w") as tar:
        for name, kind in (("./", tarfile.DIRTYPE), ("./dev/", tarfile.DIRTYPE), ("./dev/null", tarfile.CHRTYPE),
                           ("./etc/", tarfile.DIRTYPE), ("./etc/resolv.conf", tarfile.REGTYPE),
                           ("./usr/bin/python3", tarfile.SYMTYPE), ("./etc/os-release", tarfile.REGTYPE)):
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.SYMTYPE:
                info.linkname = "python3.11"
            data = b"ID=debian\n" if kind == tarfile.REGTYPE else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    layer = tmp_path / "layer.tar"
    oci.write_rootfs_layer(layer, rootfs, drop=["/etc/resolv.conf"])
    with tarfile.open(layer) as tar:
        names = {m.name: m for m in tar.getmembers()}
        os_release = tar.extractfile("./etc/os-release")
        assert os_release is not None
        assert os_release.read() == b"ID=debian\n"
    assert "./dev/null" not in names
    assert "./etc/resolv.conf" not in names
    assert "./dev" in names
    assert names["./usr/bin/python3"].linkname == "python3.11"


def test_image_file_needs_one_source() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        oci.ImageFile("/x")
    with pytest.raises(ValueError, match="absolute"):
        oci.ImageFile("x", data=b"")
