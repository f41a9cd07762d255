"""The test cluster's container images, built on this machine without a registry and cached by content hash.

The single-node test cluster runs real containers, but nothing may be pulled from a registry: every image it needs
is built here, as an OCI archive that ``ctr -n k8s.io images import`` loads under the image's usual ref. Each image
has a cache key over everything that goes into it (source files, binaries from ``make tools``, the base image's
digest, the recipe itself); an image is rebuilt only when its key changes, and written to ``<image dir>/<name>/
<key>/`` by renaming a finished build into place, so a killed build never looks complete.

Images (``python -m pko.testing.images build [NAMES...]``, or ``make images``):

- ``pause``: our own static pause (``tools/images/pause.c``), containerd's sandbox image.
- ``coredns``: the CoreDNS binary from ``make tools``.
- ``python-base``: Debian bookworm with Python 3.11 (mmdebstrap), standing in for the official
  ``python:3.11-slim-bookworm`` that pko's Dockerfile builds on.
- ``pko``: pko's image, built from the repository's ``Dockerfile`` with buildah on that base. Its key covers the
  build context (``.dockerignore``: pyproject.toml, src/ without the test bed, tools/agent-bin/; not the README), so
  any edit there rebuilds it, but buildah's layer cache is kept between builds: such a rebuild redoes only the layers
  the edited files go into (pko's own files, about a minute), not the Debian packages, the dependencies or, unless
  the agent's own sources changed, the agent executable.
- ``workspace``: a stand-in for Pulumi's ``pulumi/pulumi:<version>-nonroot``: the Pulumi CLI, its YAML and official
  Python language hosts, a non-root user, and a local wheelhouse so ``pulumi install`` works without PyPI.
- ``pko-go``: the Go reference operator's ``manager``, ``agent`` and ``tini``, for the drop-in cross-runs.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pko.testing import binaries, buildcontext, oci
from pko.testing.buildah import Buildah, CommandError, Log, run_logged

PULUMI_VERSION = "3.259.0"
PYTHON_BASE_REF = "docker.io/library/python:3.11-slim-bookworm"
PKO_REPOSITORY = "docker.io/pko/pko"
TINI = Path("/usr/bin/tini-static")
# The Debian packages of the Python base: what `python`, `python -m venv` and `pip` need to behave as in the
# official image, its shared libpython (PyInstaller needs it: pko's Dockerfile builds the agent with it), libstdc++
# for grpc, and what the official slim image carries besides (certificates, netbase, tzdata). apt comes with the
# minbase variant: pko's Dockerfile installs packages on this base.
PYTHON_BASE_PACKAGES = (
    "python3", "python3-venv", "python3-pip", "python-is-python3", "libpython3.11", "libstdc++6",
    "ca-certificates", "netbase", "tzdata",
)  # fmt: skip
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR_HOST = "deb.debian.org"
# Like Debian's slim images: no manuals, info pages, translations or docs (but keep the copyright files).
_DPKG_OPTIONS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
)
# Run by mmdebstrap on the finished chroot ($1): make it behave like the official image (pip may install into the
# system Python, which has no PEP 668 marker there; no host resolv.conf/hostname baked in), then prove that
# `python`, `python3.11`, `pip` and `python -m venv` work.
_PYTHON_BASE_HOOK = """\
set -eu
rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED "$1/etc/resolv.conf" "$1/etc/hostname"
chroot "$1" python --version
chroot "$1" python3.11 -c 'import ssl, sqlite3, ctypes, venv, ensurepip'
chroot "$1" sh -ec 'ls /usr/lib/*-linux-gnu/libpython3.11.so.1.0'
chroot "$1" pip --version
chroot "$1" sh -ec 'python -m venv /tmp/venv-check; /tmp/venv-check/bin/pip --version; rm -rf /tmp/venv-check'
"""
_DEFAULT_SOURCES = f"""\
Types: deb
URIs: http://{DEBIAN_MIRROR_HOST}/debian
Suites: {DEBIAN_SUITE} {DEBIAN_SUITE}-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://{DEBIAN_MIRROR_HOST}/debian-security
Suites: {DEBIAN_SUITE}-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


class ImageError(RuntimeError):
    """An image could not be built or is not in the cache."""


class MissingInputError(ImageError):
    """Something an image is built from (a binary from `make tools`, a base image) is missing."""


@dataclass(frozen=True)
class BuiltImage:
    """A finished image: its refs (the first is the main one), its OCI archive, cache key and manifest digest."""

    name: str
    refs: tuple[str, ...]
    archive: Path
    key: str
    digest: str


def image_dir() -> Path:
    """Where images are cached: ``$PKO_IMAGE_DIR``, default ``~/.cache/pko/images``."""
    configured = os.environ.get("PKO_IMAGE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "pko" / "images"


def repo_root() -> Path:
    """The checkout this module belongs to (the Dockerfile and ``tools/images/`` live there)."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "tools" / "images").is_dir():
        raise ImageError(f"{root} is not a pko checkout (no tools/images/): images are built from the repository")
    return root


def cache_key(name: str, refs: Sequence[str], inputs: Mapping[str, str]) -> str:
    """sha256 over an image's name, refs and key inputs (order-independent)."""
    blob = json.dumps({"image": name, "refs": list(refs), "inputs": dict(inputs)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def file_digest(path: Path) -> str:
    return oci.sha256_file(path).removeprefix("sha256:")


def _bin(name: str) -> Path:
    try:
        return binaries.require(name).resolve()
    except binaries.MissingBinaryError as err:
        raise MissingInputError(str(err)) from err


def debian_sources(sources_dir: Path = Path("/etc/apt/sources.list.d")) -> str:
    """The host's deb822 apt sources for Debian's own mirror and our suite (else the stock ones), comments dropped.

    Taken from the host so the image uses the same mirror as the machine; only ``deb.debian.org`` stanzas of the
    bookworm suites are kept (no third-party repositories end up in the image).
    """
    stanzas: list[str] = []
    for path in sorted(sources_dir.glob("*.sources")) if sources_dir.is_dir() else []:
        for block in re.split(r"\n\s*\n", path.read_text()):
            lines = [ln for ln in block.strip().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
            fields = {ln.split(":", 1)[0].strip().lower(): ln.split(":", 1)[1].strip() for ln in lines if ":" in ln}
            suites = fields.get("suites", "").split()
            if (
                "deb" in fields.get("types", "").split()
                and f"://{DEBIAN_MIRROR_HOST}/" in fields.get("uris", "") + "/"
                and suites
                and all(s.split("-")[0] == DEBIAN_SUITE for s in suites)
            ):
                stanzas.append("\n".join(lines) + "\n")
    return "\n".join(stanzas) if stanzas else _DEFAULT_SOURCES


def is_static_elf(path: Path) -> bool:
    """Whether `path` is an ELF executable without a program interpreter (runs in an image with no libc)."""
    with path.open("rb") as f:
        header = f.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2:  # 64-bit only
            return False
        order: Literal["little", "big"] = "little" if header[5] == 1 else "big"
        phoff = int.from_bytes(header[32:40], order)
        phentsize = int.from_bytes(header[54:56], order)
        phnum = int.from_bytes(header[56:58], order)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    pt_interp = 3
    return all(
        int.from_bytes(table[i * phentsize : i * phentsize + 4], order) != pt_interp for i in range(phnum)
    )


# --- recipes ---------------------------------------------------------------------------------------------------


@dataclass
class _Job:
    """One build in progress: where to write, the refs, and the base image (if any)."""

    name: str
    key: str
    refs: tuple[str, ...]
    work: Path
    archive: Path
    base: BuiltImage | None
    log: Log
    state: Path
    lock_fd: int

    def run(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
        return run_logged(argv, self.log, env=env, pass_fds=[self.lock_fd])

    def buildah(self) -> Buildah:
        return Buildah(self.state / "buildah", self.log, pass_fds=[self.lock_fd])


@dataclass(frozen=True)
class _Recipe:
    name: str
    refs: tuple[str, ...]
    inputs: Callable[[BuiltImage | None], dict[str, str]]
    make: Callable[[_Job], None]
    base: str | None = None
    needs_root: bool = False
    content_tag: str | None = None  # a repository to tag with the key's first 12 hex digits, too

    def all_refs(self, key: str) -> tuple[str, ...]:
        return (*self.refs, f"{self.content_tag}:{key[:12]}") if self.content_tag else self.refs


def _base_input(base: BuiltImage | None) -> dict[str, str]:
    if base is None:
        raise MissingInputError("the base image is not built")
    return {"base": f"{base.refs[0]}@{base.digest}"}


def _files_image(job: _Job, files: Sequence[oci.ImageFile], **config: Any) -> None:
    layer = job.work / "layer.tar"
    oci.write_files_layer(layer, files)
    diff_id = oci.sha256_file(layer)
    oci.write_image_archive(
        job.archive, [layer], oci.image_config([diff_id], created_by=f"pko.testing.images {job.name}", **config),
        job.refs,
    )


def _pause_inputs(_: BuiltImage | None) -> dict[str, str]:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise MissingInputError("gcc not found: install Debian's gcc and libc6-dev (`make tools` does, as root)")
    version = run_logged([gcc, "--version"], lambda _: None).splitlines()[0]
    return {"recipe": "pause/1", "pause.c": file_digest(repo_root() / "tools/images/pause.c"), "gcc": version}


def _pause_make(job: _Job) -> None:
    binary = job.work / "pause"
    job.run(["gcc", "-O2", "-static", "-s", "-o", str(binary), str(repo_root() / "tools/images/pause.c")])
    job.run([str(binary), "-v"])
    # The user of registry.k8s.io/pause: nobody's uid, never root.
    _files_image(job, [oci.ImageFile("/pause", source=binary)], entrypoint=["/pause"], user="65535:65535")


def _coredns_inputs(_: BuiltImage | None) -> dict[str, str]:
    return {"recipe": "coredns/1", "coredns": file_digest(_bin("coredns"))}


def _coredns_make(job: _Job) -> None:
    binary = _bin("coredns")
    if not is_static_elf(binary):
        raise ImageError(f"{binary} is dynamically linked; the image has no libc: build it with CGO_ENABLED=0")
    _files_image(
        job, [oci.ImageFile("/coredns", source=binary)], entrypoint=["/coredns"], exposed_ports=["53/tcp", "53/udp"]
    )


def _mmdebstrap_argv(hook: str) -> list[str]:
    return [
        "mmdebstrap", "--mode=root", "--variant=minbase", "--format=tar",
        "--include=" + ",".join(PYTHON_BASE_PACKAGES),
        *(f"--dpkgopt={option}" for option in _DPKG_OPTIONS),
        f"--customize-hook={hook}",
    ]  # fmt: skip


_SOURCE_DATE_EPOCH = "0"


def _python_base_inputs(_: BuiltImage | None) -> dict[str, str]:
    return {
        "recipe": "python-base/1",
        "SOURCE_DATE_EPOCH": _SOURCE_DATE_EPOCH,
        "mmdebstrap": " ".join(_mmdebstrap_argv(_PYTHON_BASE_HOOK)),
        "suite": DEBIAN_SUITE,
        "sources": debian_sources(),
    }


def _python_base_make(job: _Job) -> None:
    if shutil.which("mmdebstrap") is None:
        raise MissingInputError("mmdebstrap not found: install Debian's mmdebstrap (`make tools` does, as root)")
    sources = job.work / "debian.sources"
    sources.write_text(debian_sources())
    hook = job.work / "customize.sh"
    hook.write_text(_PYTHON_BASE_HOOK)
    rootfs = job.work / "rootfs.tar"
    argv = _mmdebstrap_argv(f'sh {hook} "$1"')
    # Its chroot is built in our scratch directory (so a killed build's leftovers are ours to clean up), with file
    # times clamped to the epoch: the same mirror content gives the same image.
    tmp = job.work / "tmp"
    tmp.mkdir()
    env = {"TMPDIR": str(tmp), "SOURCE_DATE_EPOCH": _SOURCE_DATE_EPOCH}
    job.run(["nice", "-n", "10", *argv, DEBIAN_SUITE, str(rootfs), str(sources)], env=env)
    layer = job.work / "layer.tar"
    oci.write_rootfs_layer(layer, rootfs)
    rootfs.unlink()
    config = oci.image_config(
        [oci.sha256_file(layer)],
        cmd=["python3"],
        env=[f"PATH={oci.DEFAULT_PATH}", "LANG=C.UTF-8"],
        created_by=f"pko.testing.images python-base (mmdebstrap {DEBIAN_SUITE} minbase)",
    )
    oci.write_image_archive(job.archive, [layer], config, job.refs)


def _pko_inputs(base: BuiltImage | None) -> dict[str, str]:
    root = repo_root()
    files = buildcontext.context_files(root)
    return {
        "recipe": "pko/2",
        **_base_input(base),
        "Dockerfile": file_digest(root / "Dockerfile"),
        "context": buildcontext.tree_hash(root, files),
    }


def _host_trust() -> list[str]:
    """The host's CA bundle, mounted over the image's own while RUN steps fetch packages (never part of the image).

    Builds reach PyPI as this machine does: through whatever TLS-inspecting proxy its trust store accepts. The Debian
    pip of the base image (and of the venvs made from it) reads exactly this file.
    """
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    return [f"{bundle}:{bundle}:ro"] if bundle.is_file() else []


def _buildah_image(
    job: _Job,
    context: Path,
    containerfile: Path,
    checks: Sequence[Sequence[str]],
    build_args: Mapping[str, str] | None = None,
) -> list[str]:
    """Build `containerfile` on the base image with buildah, run `checks` in it, and export it as `job.archive`."""
    assert job.base is not None
    buildah = job.buildah()
    buildah.prepare()
    try:
        buildah.load(job.base.archive, job.base.refs[0], job.base.digest)
        buildah.build(context, containerfile, job.refs[0], build_args, _host_trust())
        outputs = buildah.check(job.refs[0], checks) if checks else []
        layout = job.work / "layout"
        buildah.export(job.refs[0], layout)
        oci.repack_layout(layout, job.archive, job.refs)
    finally:
        buildah.remove_containers()
    return outputs


def _pko_make(job: _Job) -> None:
    root = repo_root()
    # `pko --help` proves the operator's venv and entry point; `/agent version` the PyInstaller executable (as the
    # image's non-root user); `/tini --version` the static tini the bootstrap container copies; the unpacked tree
    # beside `/agent` is what a pod that mounts the image runs (the launcher would otherwise unpack it into /tmp).
    trees = ["sh", "-c", "ls -d /.pko-agent-*/pko-agent /tmp/pko-agent-* 2>/dev/null; true"]
    outputs = _buildah_image(
        job, root, root / "Dockerfile", [["pko", "--help"], ["/agent", "version"], ["/tini", "--version"], ["id", "-u"],
                                        trees]
    )
    if outputs[3].strip().splitlines()[-1] != "65532":
        raise ImageError(f"pko's image runs as uid {outputs[3].strip()!r}, not 65532")
    found = outputs[4].split()
    if len(found) != 1 or not found[0].startswith("/.pko-agent-"):
        raise ImageError(f"pko's image should carry one unpacked agent tree beside /agent, and /agent should run it "
                         f"unpacking nothing: found {found}")


_WORKSPACE_BINARIES = (
    "pulumi",
    "pulumi-language-yaml",
    "pulumi-language-python",
    "pulumi-language-python-exec",
    "pulumi-resource-pulumi-python",
    "pulumi-language-nodejs",
    "pulumi-language-go",
)
# Node.js with npm, and the Go toolchain, from this machine (Debian bookworm, as the image): the Node.js and Go hosts
# run them. Go's own tests, API lists and docs stay out.
NODE = Path("/usr/bin/node")
NPM_DIR = Path("/usr/lib/node_modules/npm")
_GOROOT_SKIP = {"test", "api", "doc", "misc"}
# `pulumi install` of a Python program in the finished image, offline: the venv must come from the wheelhouse.
_WORKSPACE_PROGRAM_CHECK = """\
set -eu
cd "$(mktemp -d)"
printf 'name: check\\nruntime:\\n  name: python\\n  options:\\n    virtualenv: venv\\n' > Pulumi.yaml
echo 'pulumi>=3' > requirements.txt
pulumi install
venv/bin/python -c 'import grpc, pulumi; print("the venv imports pulumi and grpc")'
node --version
npm --version
go version
pulumi-language-nodejs -version
pulumi-language-go -version
"""


def _goroot() -> Path:
    go = shutil.which("go")
    if go is None:
        raise MissingInputError("go is not on PATH: the workspace image carries this machine's Go toolchain")
    return Path(subprocess.run([go, "env", "GOROOT"], capture_output=True, text=True, check=True).stdout.strip())


def _toolchains() -> dict[str, str]:
    """What the image's Node.js and Go come from (their versions; the cache key changes when they do)."""
    if not NODE.is_file() or not (NPM_DIR / "package.json").is_file():
        raise MissingInputError(f"{NODE} and {NPM_DIR} not found: install Node.js with npm (Debian's nodejs)")
    node = subprocess.run([str(NODE), "--version"], capture_output=True, text=True, check=True).stdout.strip()
    npm = json.loads((NPM_DIR / "package.json").read_text())["version"]
    go = (_goroot() / "VERSION").read_text().splitlines()[0]
    return {"node": node, "npm": npm, "go": go}


def _workspace_inputs(base: BuiltImage | None) -> dict[str, str]:
    root = repo_root()
    return {
        "recipe": "workspace/2",
        **_toolchains(),
        **_base_input(base),
        "Containerfile": file_digest(root / "tools/images/workspace.Containerfile"),
        "pulumi-version": PULUMI_VERSION,
        **{name: file_digest(_bin(name)) for name in _WORKSPACE_BINARIES},
    }


def _workspace_make(job: _Job) -> None:
    context = job.work / "context"
    for name in _WORKSPACE_BINARIES:
        _copy(_bin(name), context / "bin" / name)
    _copy(NODE, context / "node" / "bin" / "node")
    shutil.copytree(NPM_DIR, context / "node" / "lib" / "node_modules" / "npm", symlinks=True)
    goroot = _goroot()
    shutil.copytree(goroot, context / "go", symlinks=True,
                    ignore=lambda d, names: _GOROOT_SKIP & set(names) if Path(d) == goroot else set())
    outputs = _buildah_image(
        job,
        context,
        repo_root() / "tools/images/workspace.Containerfile",
        [["id", "-u"], ["pulumi", "version"], ["sh", "-c", _WORKSPACE_PROGRAM_CHECK]],
        {"PULUMI_VERSION": PULUMI_VERSION},
    )
    if outputs[0].strip().splitlines()[-1] != "1000":
        raise ImageError(f"the workspace image runs as uid {outputs[0].strip()!r}, not 1000")
    if f"v{PULUMI_VERSION}" not in outputs[1]:
        raise ImageError(f"the workspace image's pulumi reports {outputs[1].strip()!r}, not v{PULUMI_VERSION}")


def _pko_go_inputs(base: BuiltImage | None) -> dict[str, str]:
    if not TINI.is_file():
        raise MissingInputError(f"{TINI} not found: install Debian's tini (`make tools` does, as root)")
    return {
        "recipe": "pko-go/1",
        **_base_input(base),
        "Containerfile": file_digest(repo_root() / "tools/images/pko-go.Containerfile"),
        "manager": file_digest(_bin("pko-go-manager")),
        "agent": file_digest(_bin("pko-go-agent")),
        "tini": file_digest(TINI),
    }


def _pko_go_make(job: _Job) -> None:
    context = job.work / "context"
    _copy(_bin("pko-go-manager"), context / "manager")
    _copy(_bin("pko-go-agent"), context / "agent")
    _copy(TINI, context / "tini")
    # What the workspace pod's bootstrap container runs (through the entrypoint): `cp /agent /tini /share/`.
    _buildah_image(
        job,
        context,
        repo_root() / "tools/images/pko-go.Containerfile",
        [["/tini", "--", "cp", "/agent", "/tini", "/tmp/"], ["/tmp/agent", "version"]],
    )


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    dst.chmod(0o755)


RECIPES: dict[str, _Recipe] = {
    recipe.name: recipe
    for recipe in (
        _Recipe("pause", ("registry.k8s.io/pause:3.10.1",), _pause_inputs, _pause_make),
        _Recipe("coredns", ("docker.io/pko-test/coredns:1.13.1",), _coredns_inputs, _coredns_make),
        _Recipe("python-base", (PYTHON_BASE_REF,), _python_base_inputs, _python_base_make, needs_root=True),
        _Recipe(
            "pko", (f"{PKO_REPOSITORY}:dev",), _pko_inputs, _pko_make,
            base="python-base", needs_root=True, content_tag=PKO_REPOSITORY,
        ),
        _Recipe(
            "workspace",
            (f"docker.io/pulumi/pulumi:{PULUMI_VERSION}-nonroot", "docker.io/pulumi/pulumi:latest-nonroot"),
            _workspace_inputs, _workspace_make, base="python-base", needs_root=True,
        ),
        _Recipe(
            "pko-go", ("docker.io/pko-test/pulumi-kubernetes-operator:v2.9.0",), _pko_go_inputs, _pko_go_make,
            base="python-base", needs_root=True,
        ),
    )
}  # fmt: skip
NAMES = tuple(RECIPES)


# --- the cache ---------------------------------------------------------------------------------------------------


def _mount_points_below(path: Path) -> list[str]:
    """Mount points inside `path`, deepest first (from /proc/self/mountinfo, octal escapes decoded)."""
    prefix = str(path.resolve()) + "/"
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
        if point.startswith(prefix):
            found.append(point)
    return sorted(found, key=lambda p: p.count("/"), reverse=True)


def _remove_tree(path: Path) -> None:
    """Delete a scratch tree, first detaching whatever a killed build left mounted in it (mmdebstrap mounts /proc,
    /sys and device nodes into its chroot): never delete through a mount into the host's own files."""
    if not path.exists():
        return
    for point in _mount_points_below(path):
        subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)
    if _mount_points_below(path):
        raise ImageError(f"cannot clean {path}: something is still mounted below it")
    shutil.rmtree(path, ignore_errors=True)



def _entry_dir(name: str, key: str) -> Path:
    return image_dir() / name / key[:16]


def _read_entry(name: str, key: str) -> BuiltImage | None:
    entry = _entry_dir(name, key)
    try:
        meta = json.loads((entry / "image.json").read_text())
    except (OSError, ValueError):
        return None
    archive = entry / "image.tar"
    if meta.get("key") != key or not archive.is_file():
        return None
    return BuiltImage(name, tuple(meta["refs"]), archive, key, meta["digest"])


def _check_name(name: str) -> _Recipe:
    if name not in RECIPES:
        raise ImageError(f"unknown image {name!r}; known: {', '.join(NAMES)}")
    return RECIPES[name]


def current_key(name: str) -> str:
    """The cache key of `name` for the current inputs (its base image must be built)."""
    recipe = _check_name(name)
    base = built(recipe.base) if recipe.base else None
    return cache_key(name, recipe.refs, recipe.inputs(base))


def built(name: str) -> BuiltImage:
    """The cached image `name` for the current inputs, or an error that says to run `make images`."""
    recipe = _check_name(name)
    try:
        key = current_key(name)
    except MissingInputError as err:
        raise MissingInputError(f"image {name} cannot be built: {err}") from err
    image = _read_entry(name, key)
    if image is None:
        raise ImageError(
            f"image {name} ({recipe.refs[0]}) is not built for the current sources and binaries (key {key[:16]}) in "
            f"{image_dir()}: run `make images` (or `python -m pko.testing.images build {name}`)"
        )
    return image


def _closure(names: Iterable[str]) -> list[str]:
    wanted: set[str] = set()
    for name in names:
        recipe = _check_name(name)
        wanted.add(name)
        if recipe.base:
            wanted.update(_closure([recipe.base]))
    return [name for name in NAMES if name in wanted]


@contextlib.contextmanager
def _locked(directory: Path, log: Log) -> Iterator[int]:
    """One builder at a time per image directory (a test session and `make images` may overlap); yields the lock's
    file descriptor, which build commands inherit."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another image build in {directory} to finish")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield lock.fileno()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build_one(recipe: _Recipe, base: BuiltImage | None, log: Log, lock_fd: int) -> BuiltImage:
    inputs = recipe.inputs(base)
    key = cache_key(recipe.name, recipe.refs, inputs)
    cached = _read_entry(recipe.name, key)
    if cached is not None:
        log(f"{recipe.name}: cached ({cached.refs[0]}, key {key[:16]})")
        return cached
    if recipe.needs_root and os.geteuid() != 0:
        raise ImageError(f"building image {recipe.name} needs root (mmdebstrap and buildah run as root)")
    parent = image_dir() / recipe.name
    parent.mkdir(parents=True, exist_ok=True)
    for stale in parent.glob(".*.partial-*"):  # left by a killed build
        _remove_tree(stale)
    refs = recipe.all_refs(key)
    log(f"{recipe.name}: building {', '.join(refs)} (key {key[:16]})")
    start = time.monotonic()
    partial = parent / f".{key[:16]}.partial-{os.getpid()}"
    final = _entry_dir(recipe.name, key)
    try:
        partial.mkdir()
        work = Path(tempfile.mkdtemp(prefix=f".work-{recipe.name}-", dir=image_dir()))
        job = _Job(recipe.name, key, refs, work, partial / "image.tar", base, log, image_dir(), lock_fd)
        try:
            recipe.make(job)
        finally:
            _remove_tree(work)
        info = oci.read_archive(job.archive)
        if info.refs != refs:
            raise ImageError(f"{recipe.name}: the archive names {info.refs}, expected {refs}")
        seconds = time.monotonic() - start
        size = job.archive.stat().st_size
        meta = {
            "name": recipe.name,
            "refs": list(refs),
            "key": key,
            "digest": info.manifest.digest,
            "inputs": inputs,
            "size": size,
            "build_seconds": round(seconds, 1),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (partial / "image.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    for old in parent.iterdir():  # superseded builds of this image
        if old.is_dir() and old != final and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)
    log(f"{recipe.name}: built {refs[0]} in {seconds:.0f}s ({size / 1e6:.0f} MB, {info.manifest.digest[:19]})")
    result = _read_entry(recipe.name, key)
    if result is None:
        raise ImageError(f"{recipe.name}: {final} vanished right after the build")
    return result


def _stderr(line: str) -> None:
    print(f"[images {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def build(names: Iterable[str] | None = None, *, log: Log = _stderr) -> dict[str, BuiltImage]:
    """Build the images `names` (all by default) and the images they build on, when not cached; return them all.

    Every image that can be built is; then an ImageError lists the ones that failed (a missing input names the
    missing binary).
    """
    wanted = _closure(NAMES if names is None else list(names))
    results: dict[str, BuiltImage] = {}
    failures: dict[str, str] = {}
    with _locked(image_dir(), log) as lock_fd:
        for stale in image_dir().glob(".work-*"):  # scratch of a killed build (nobody else builds: we hold the lock)
            _remove_tree(stale)
        for name in wanted:
            recipe = RECIPES[name]
            if recipe.base and recipe.base not in results:
                failures[name] = f"its base image {recipe.base} is not available"
                continue
            try:
                base = results.get(recipe.base) if recipe.base else None
                results[name] = _build_one(recipe, base, log, lock_fd)
            except (ImageError, CommandError, oci.ArchiveError, OSError) as err:
                log(f"{name}: FAILED: {err}")
                failures[name] = str(err).splitlines()[0]
    if failures:
        details = "\n".join(f"- {name}: {reason}" for name, reason in failures.items())
        raise ImageError(f"{len(failures)} image(s) failed to build:\n{details}")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pko.testing.images", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build_cmd = sub.add_parser("build", help="build missing images (all by default); prints the image dir last")
    build_cmd.add_argument("names", nargs="*", metavar="NAME", help=", ".join(NAMES))
    sub.add_parser("list", help="the cached images for the current inputs")
    args = parser.parse_args(argv)
    if args.command == "list":
        for name in NAMES:
            try:
                image = built(name)
                print(f"{name}\t{' '.join(image.refs)}\t{image.archive}")
            except ImageError as err:
                print(f"{name}\tmissing: {err}")
        return 0
    try:
        build(args.names or None)
    except ImageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        print(image_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main())
