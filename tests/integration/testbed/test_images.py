"""The image build end to end on its smallest image: `pause` is compiled, packed as an OCI archive, cached, and
accepted by a real containerd, which runs it.

The containerd here is a throwaway one (its own root, state and socket under a temporary directory, CRI plugin
off), so the test touches nothing of the test cluster's.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pko.testing import binaries, images, oci, ociregistry, pluginimages, programs

pytestmark = pytest.mark.timeout(300)

PAUSE_REF = "registry.k8s.io/pause:3.10.1"


def _need(tool: str) -> str:
    """containerd and ctr are the ones `make tools` builds (containerd 2), as the test cluster's node runs them."""
    try:
        return str(binaries.require(tool))
    except binaries.MissingBinaryError as err:
        pytest.fail(str(err))


@pytest.fixture
def image_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "images"
    monkeypatch.setenv("PKO_IMAGE_DIR", str(path))
    return path


@contextlib.contextmanager
def _containerd() -> Iterator[list[str]]:
    """A private containerd; yields the `ctr` command line that talks to it."""
    if os.geteuid() != 0:
        pytest.fail("containerd needs root: run this test as root")
    containerd, ctr = _need("containerd"), _need("ctr")
    work = Path(tempfile.mkdtemp(prefix="pko-ctrd-"))  # short: the socket path must fit in sun_path
    socket = work / "containerd.sock"
    (work / "config.toml").write_text(
        "version = 3\n"
        f'root = "{work}/root"\n'
        f'state = "{work}/state"\n'
        "imports = []\n"
        'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images",'
        ' "io.containerd.cri.v1.runtime", "io.containerd.nri.v1.nri"]\n'
        f'[grpc]\n  address = "{socket}"\n'
        f'[plugins."io.containerd.internal.v1.opt"]\n  path = "{work}/opt"\n'
    )
    log = (work / "containerd.log").open("w")
    # its runc shim from the same build, not whatever `containerd-shim-runc-v2` comes first on PATH
    path = f"{binaries.bin_dir()}{os.pathsep}{os.environ.get('PATH', '')}"
    proc = subprocess.Popen([containerd, "--config", str(work / "config.toml")], stdout=log, stderr=log,
                            env={**os.environ, "PATH": path})
    command = [ctr, "--address", str(socket), "--namespace", "k8s.io"]
    try:
        deadline = time.monotonic() + 30
        while subprocess.run([*command, "version"], capture_output=True).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"containerd did not start:\n{(work / 'containerd.log').read_text()[-3000:]}")
            time.sleep(0.1)
        yield command
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        for line in reversed(Path("/proc/self/mountinfo").read_text().splitlines()):
            mount_point = line.split()[4]
            if mount_point.startswith(str(work) + "/"):
                subprocess.run(["umount", "-l", mount_point], check=False)
        shutil.rmtree(work, ignore_errors=True)


def test_pause_archive_layout(image_dir: Path) -> None:
    built = images.build(["pause"], log=lambda _: None)["pause"]

    assert built.refs == (PAUSE_REF,)
    assert built.archive.parent == image_dir / "pause" / built.key[:16]
    assert images.built("pause") == built
    members: dict[str, bytes] = {}
    with tarfile.open(built.archive) as tar:
        for member in tar.getmembers():
            if (f := tar.extractfile(member)) is not None:
                members[member.name] = f.read()
    assert json.loads(members["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    (entry,) = json.loads(members["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == PAUSE_REF
    assert entry["digest"] == built.digest
    blobs = {name: data for name, data in members.items() if name.startswith("blobs/")}
    for name, data in blobs.items():
        assert "sha256:" + hashlib.sha256(data).hexdigest() == "sha256:" + name.rsplit("/", 1)[1]
    manifest = json.loads(blobs[oci.Descriptor("", built.digest, 0).blob_name])
    config = json.loads(blobs["blobs/sha256/" + manifest["config"]["digest"].removeprefix("sha256:")])
    assert config["config"]["Entrypoint"] == ["/pause"]
    assert config["config"]["User"] == "65535:65535"
    (layer,) = manifest["layers"]
    with tarfile.open(fileobj=io.BytesIO(blobs["blobs/sha256/" + layer["digest"].removeprefix("sha256:")])) as tar:
        (pause,) = tar.getmembers()
    assert pause.name == "pause"
    assert pause.mode == 0o755
    assert pause.size > 100_000  # statically linked

    # Cached: a second build reuses the archive as it is.
    mtime = built.archive.stat().st_mtime_ns
    logged: list[str] = []
    assert images.build(["pause"], log=logged.append)["pause"] == built
    assert built.archive.stat().st_mtime_ns == mtime
    assert any("cached" in line for line in logged)


def test_containerd_imports_and_runs_pause(image_dir: Path) -> None:
    built = images.build(["pause"], log=lambda _: None)["pause"]
    with _containerd() as ctr:
        subprocess.run([*ctr, "images", "import", str(built.archive)], check=True, capture_output=True)
        listing = subprocess.run([*ctr, "images", "ls"], check=True, capture_output=True, text=True).stdout
        assert any(line.split()[0] == PAUSE_REF and built.digest in line for line in listing.splitlines()[1:])
        run = subprocess.run(
            [*ctr, "run", "--rm", PAUSE_REF, "pko-pause-check", "/pause", "-v"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert "3.10.1" in run.stdout


def test_a_plugin_image_pushed_to_the_registry_is_pulled_with_its_plugin_folder(tmp_path: Path) -> None:
    """What the cluster tier and the bench mount: a plugin's image pushed to the test bed's registry (gzipped
    layer, ref pinned to its digest) is one containerd pulls over plain HTTP and unpacks to the plugin's folder as
    the CLI names it; the registry's log says what was fetched, which is what the bench counts."""
    plugin = pluginimages.PluginImage("random", programs.RANDOM_VERSION)
    with ociregistry.running(tmp_path / "registry") as registry:
        (image,) = pluginimages.push(registry, [plugin])
        assert image.ref == f"{registry.address}/pko-test/pulumi-plugin-random:{plugin.version}@{image.digest}"
        assert [layer.media_type for layer in image.layers] == [oci.MEDIA_LAYER_GZIP]
        assert pluginimages.pulled_bytes(registry, [image]) == 0
        with _containerd() as ctr:
            pull = subprocess.run([*ctr, "images", "pull", "--plain-http", image.ref], capture_output=True,
                                  text=True, timeout=120)
            assert pull.returncode == 0, pull.stderr
            target = tmp_path / "mounted"
            target.mkdir()
            subprocess.run([*ctr, "images", "mount", "--rw=false", image.ref, str(target)], check=True,
                           capture_output=True)
            try:
                binary = target / plugin.folder / "pulumi-resource-random"
                assert binary.is_file()
                assert os.access(binary, os.X_OK)
                assert binary.stat().st_size == binaries.require("pulumi-resource-random").stat().st_size
            finally:
                subprocess.run([*ctr, "images", "unmount", str(target)], check=False, capture_output=True)
        served = registry.served(image.repository)
        assert f"GET manifests/{image.digest}" in served, served
        assert pluginimages.pulled_bytes(registry, [image]) == image.layers[0].size > 10_000_000
