"""Fills the package mirror's cache from the public registries, once, at `make tools` time.

An air-gapped enterprise runs mirrors of npm, PyPI and the Go module proxy, and a plugin server: workspace pods
download from those, never from the internet. The test bed does the same (:mod:`pko.testing.mirror` serves this
cache at the node's address), so real programs install their packages in their pods over the real network path
while nothing is fetched from outside the machine at test time.

What is mirrored is the closure of the packages the test programs and the benchmark name
(:mod:`pko.testing.programs`): npm resolves the npm roots, pip downloads the PyPI roots' wheels, and the Go tool
downloads the Go program's module graph. Each part lands in ``$PKO_MIRROR_DIR/<part>-<key>/`` (the key hashes
the roots), is built only when missing, and is checked (npm integrity hashes, a Go build against the mirrored
modules) before it is marked complete. Plugins are not copied here: the mirror serves the packed plugins that
`make tools` builds into the bin directory.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pko.testing import programs

PART_NPM = "npm"
PART_PYPI = "pypi"
PART_GO = "go"


def mirror_dir() -> Path:
    configured = os.environ.get("PKO_MIRROR_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "pko" / "mirror"


def part_key(part: str) -> str:
    roots: object = {
        PART_NPM: programs.NPM_ROOTS,
        PART_PYPI: programs.PYPI_ROOTS,
        PART_GO: [programs.GO_MOD, programs.GO_MAIN],
    }[part]
    digest = hashlib.sha256(json.dumps([part, 1, roots], sort_keys=True).encode()).hexdigest()
    return digest[:12]


def part_dir(part: str) -> Path:
    """Where a part's files are; it is usable only once ``.complete`` is in it."""
    return mirror_dir() / f"{part}-{part_key(part)}"


def _log(message: str) -> None:
    print(f"[mirror] {message}", file=sys.stderr, flush=True)


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done.stdout


def _ssl_context() -> ssl.SSLContext:
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    return ssl.create_default_context(cafile=str(bundle) if bundle.is_file() else None)


def npm_tarball_name(name: str, version: str) -> str:
    """The file name the npm registry gives a package's tarball: the unscoped name, a dash, the version."""
    return f"{name.rsplit('/', 1)[-1]}-{version}.tgz"


def _manifest(tgz: Path) -> dict[str, Any]:
    """The package.json inside a package tarball (its one top-level directory is usually ``package/``)."""
    with tarfile.open(tgz, "r:gz") as archive:
        for member in archive:
            parts = member.name.split("/")
            if len(parts) == 2 and parts[1] == "package.json" and member.isfile():
                handle = archive.extractfile(member)
                assert handle is not None
                loaded: dict[str, Any] = json.loads(handle.read())
                return loaded
    raise RuntimeError(f"{tgz} holds no package.json")


def _fill_npm(out: Path, scratch: Path) -> None:
    """Resolve the npm roots with npm itself, download every locked tarball, check its integrity, and write one
    manifest per package (what a registry's packument lists, for the versions mirrored)."""
    project = scratch / "resolve"
    project.mkdir()
    (project / "package.json").write_text(json.dumps({"name": "mirror", "version": "0.0.0",
                                                      "dependencies": programs.NPM_ROOTS}))
    _run(["npm", "install", "--package-lock-only", "--ignore-scripts", "--no-audit", "--no-fund"], project)
    lock = json.loads((project / "package-lock.json").read_text())
    registry = _run(["npm", "config", "get", "registry"], project).strip().rstrip("/")
    context = _ssl_context()
    packages: dict[str, dict[str, Any]] = {}
    for path, entry in lock["packages"].items():
        if not path:
            continue
        name = entry.get("name") or path.rsplit("node_modules/", 1)[-1]
        version = entry["version"]
        file = out / "tarballs" / name / npm_tarball_name(name, version)
        if not file.is_file():
            url = f"{registry}/{name}/-/{npm_tarball_name(name, version)}"
            with urllib.request.urlopen(url, context=context, timeout=120) as response:
                data = response.read()
            algorithm, _, expected = entry["integrity"].partition("-")
            actual = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
            if actual != expected:
                raise RuntimeError(f"{url}: {algorithm} {actual} does not match the lock's {expected}")
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_bytes(data)
        manifest = _manifest(file)
        manifest["dist"] = {"integrity": entry["integrity"],
                            "shasum": hashlib.sha1(file.read_bytes()).hexdigest()}
        packages.setdefault(name, {})[version] = manifest
    for name, versions in packages.items():
        target = out / "packuments" / f"{name}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(versions, sort_keys=True))
    _log(f"npm: {sum(len(v) for v in packages.values())} versions of {len(packages)} packages")


def _fill_pypi(out: Path, scratch: Path) -> None:
    """Download the PyPI roots' wheels (for the workspace image's Python, which is this machine's minor version)."""
    files = out / "files"
    files.mkdir()
    _run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--dest", str(files),
          *programs.PYPI_ROOTS], scratch, {"PIP_NO_INDEX": "", "PIP_FIND_LINKS": ""})
    _log(f"pypi: {len(list(files.iterdir()))} files")


def _fill_go(out: Path, scratch: Path) -> None:
    """Download the Go program's module graph into a module cache whose download directory is, by the Go tool's
    own layout, a GOPROXY tree; then build the program against that tree alone."""
    module = scratch / "module"
    module.mkdir()
    (module / "go.mod").write_text(programs.GO_MOD)
    (module / "main.go").write_text(programs.GO_MAIN)
    modcache = scratch / "modcache"
    env = {"GOMODCACHE": str(modcache), "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local",
           "GONOSUMDB": "github.com/pulumi"}
    _run(["go", "mod", "tidy"], module, env)
    _run(["go", "mod", "download", "all"], module, env)
    shutil.copytree(modcache / "cache" / "download", out / "proxy")
    (out / "go.sum").write_text((module / "go.sum").read_text())
    # The proof: a fresh module cache, the mirror's tree as the only proxy, no checksum database.
    check = {**env, "GOMODCACHE": str(scratch / "modcache-check"), "GOPROXY": f"file://{out / 'proxy'}",
             "GOSUMDB": "off", "GOFLAGS": "-mod=readonly"}
    _run(["go", "build", "-o", str(scratch / "program"), "."], module, check)
    _log(f"go: {sum(1 for _ in (out / 'proxy').rglob('*.zip'))} module zips")


_FILLERS: dict[str, Callable[[Path, Path], None]] = {PART_NPM: _fill_npm, PART_PYPI: _fill_pypi, PART_GO: _fill_go}


def fill(parts: list[str] | None = None) -> None:
    for part in parts or list(_FILLERS):
        target = part_dir(part)
        if (target / ".complete").is_file():
            _log(f"{part}: cached in {target}")
            continue
        _log(f"{part}: filling {target} from the public registry")
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        with tempfile.TemporaryDirectory(prefix=f"pko-mirror-{part}-") as scratch:
            _FILLERS[part](partial, Path(scratch))
        (partial / ".complete").touch()
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    for stale in mirror_dir().iterdir():
        if stale.is_dir() and stale.name.rsplit("-", 1)[0] in _FILLERS and stale.name not in {
            part_dir(p).name for p in _FILLERS
        }:
            shutil.rmtree(stale, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    fill(args or None)
    print(mirror_dir())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
