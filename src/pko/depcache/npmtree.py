"""What an npm lockfile determines: the ``node_modules`` tree the dependency cache builds once and every workspace
pod with the same lockfile unpacks, instead of each running ``npm install``.

Why: with every tarball already in the cache, a workspace's ``npm install`` still spends most of a cold start
(11 of 21 s for a TypeScript program with the Kubernetes SDK on our 2-core node, and ten of them at once on a
fleet's start) resolving, extracting and linking the same ~260 packages. The tree those steps produce is a pure
function of the lockfile's entries — where each package goes, its name, version and integrity, its bin links —
when no install script runs. So the cache builds it once per lockfile and serves it.

Why it is safe to share between tenants: the tree's key is the sha256 of exactly the entries that build it, every
tarball comes from the operator's own npm upstream and must match the lockfile's integrity before it is used, and
nothing else a pod sends is kept. Two pods get the same tree only if their lockfiles ask for the same bytes in the
same places — what ``npm ci`` would have installed for each of them. Install scripts are not run here (the
workspace runs them, :mod:`pko.agent.nodemodules`), so the operator never executes a package's code.

Lockfiles it will not build (a git, file or link dependency, a package for another platform that is not optional,
a path that leaves ``node_modules``) get a :class:`Refused` reason, and the workspace falls back to ``npm install``.

Pure: bytes in, values out. Must never do I/O.
"""

from __future__ import annotations

import base64
import hashlib
import json
import posixpath
import re
from dataclasses import dataclass
from typing import Any

#: Bumped whenever the tree built for the same entries would differ (it is part of every key).
FORMAT = "pko-npm-tree/1"
#: A lockfile bigger than this is not read (a real one of 2,000 packages is about 1.5 MB).
MAX_LOCKFILE_BYTES = 16 << 20
#: The platform trees are built for (`os`, `cpu` and `libc` as npm names them); a workspace on another one
#: installs with npm (:func:`pko.agent.nodemodules.offer` checks its own).
PLATFORM = ("linux", "x64", "glibc")

_NAME = r"(?:@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9_.~-][a-z0-9._~-]*"
_PATH = re.compile(rf"^node_modules/{_NAME}(?:/node_modules/{_NAME})*$", re.IGNORECASE)
_PACKAGE_NAME = re.compile(rf"^{_NAME}$", re.IGNORECASE)
_VERSION = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+(?:[-+][0-9A-Za-z.+-]*)?$")
_BIN_NAME = re.compile(r"^[A-Za-z0-9@._+-]+$")
_ALGORITHMS = ("sha512", "sha384", "sha256", "sha1")  # strongest first, as npm's ssri picks


class Refused(ValueError):
    """The lockfile asks for something the cache does not build a tree for; the message says what."""


@dataclass(frozen=True)
class Integrity:
    algorithm: str
    digest: bytes

    def matches(self, data_digest: bytes) -> bool:
        return data_digest == self.digest

    @property
    def text(self) -> str:
        """What the key holds: the hash that is checked (extra hashes in the lockfile's text change nothing)."""
        return f"{self.algorithm}-{base64.b64encode(self.digest).decode()}"


@dataclass(frozen=True)
class Package:
    """One lockfile entry the tree holds: where it goes, what it is, how to check it, its bin links."""

    path: str  # "node_modules/a/node_modules/@s/b"
    name: str  # the registry name (an alias's real name)
    version: str
    integrity: Integrity
    integrity_text: str
    bins: tuple[tuple[str, str], ...]  # (link name, target inside the package), normalized
    install_script: bool

    @property
    def tarball(self) -> str:
        """The registry path of its tarball, as the npm part of the cache answers it."""
        return f"/{self.name}/-/{self.name.rsplit('/', 1)[-1]}-{self.version}.tgz"

    @property
    def folder(self) -> str:
        """Its folder's name under its ``node_modules`` (``@s/b``): what ``npm rebuild`` matches, which for an alias
        is not the registry name."""
        return self.path.rsplit("node_modules/", 1)[-1]

    @property
    def bin_dir(self) -> str:
        """The ``.bin`` folder its links go to: that of the ``node_modules`` it sits in."""
        return f"{self.path.rsplit('/node_modules/', 1)[0]}/node_modules/.bin" if "/node_modules/" in self.path \
            else "node_modules/.bin"


@dataclass(frozen=True)
class Tree:
    key: str  # sha256 hex of FORMAT and the packages
    packages: tuple[Package, ...]
    root: dict[str, Any]  # the lockfile's root entry (what package.json must say for the tree to be current)
    skipped: tuple[str, ...]  # optional packages for another platform, as npm skips them


def parse_integrity(text: str) -> Integrity:
    """The strongest hash of an SRI string (``sha512-<base64> sha1-<base64>``)."""
    found: dict[str, bytes] = {}
    for item in text.split():
        algorithm, sep, encoded = item.partition("-")
        if sep and algorithm in _ALGORITHMS:
            try:
                found[algorithm] = base64.b64decode(encoded.split("?", 1)[0], validate=True)
            except ValueError:
                continue
    for algorithm in _ALGORITHMS:
        if algorithm in found:
            return Integrity(algorithm, found[algorithm])
    raise Refused(f"no usable integrity hash in {text!r}")


def _platform_ok(entry: dict[str, Any]) -> bool:
    """npm's os/cpu rule: a list of allowed values, where ``!x`` excludes x."""
    for field, ours in zip(("os", "cpu", "libc"), PLATFORM, strict=True):
        allowed = entry.get(field)
        if not isinstance(allowed, list) or not allowed:
            continue
        values = [str(v) for v in allowed]
        if f"!{ours}" in values:
            return False
        if any(not v.startswith("!") for v in values) and ours not in values:
            return False
    return True


def _bins(path: str, entry: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    raw = entry.get("bin")
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise Refused(f"{path}: bin is not a map")
    bins: list[tuple[str, str]] = []
    for name, target in sorted(raw.items()):
        if not isinstance(name, str) or not isinstance(target, str):
            raise Refused(f"{path}: bin entries must be text")
        link = name.rsplit("/", 1)[-1]  # a scoped bin name links as its last part, as npm does
        normalized = posixpath.normpath(target.replace("\\", "/"))
        if not _BIN_NAME.match(link) or link in (".", "..") or normalized.startswith(("/", "../")) \
                or normalized in (".", ".."):
            raise Refused(f"{path}: bin {name!r} → {target!r} leaves its package")
        bins.append((link, normalized))
    return tuple(bins)


def _package(path: str, entry: dict[str, Any]) -> Package:
    if not _PATH.match(path) or any(s in (".", "..") for s in path.split("/")):
        raise Refused(f"{path!r} is not a node_modules path")
    if entry.get("link"):
        raise Refused(f"{path} is a link (a workspace or file: dependency)")
    name = entry.get("name") or path.rsplit("node_modules/", 1)[-1]
    version = entry.get("version")
    if not isinstance(name, str) or not _PACKAGE_NAME.match(name):
        raise Refused(f"{path}: {name!r} is not a package name")
    if not isinstance(version, str) or not _VERSION.match(version):
        raise Refused(f"{path}: version {version!r} is not a registry version")
    resolved = entry.get("resolved")
    if resolved is not None and (not isinstance(resolved, str)
                                 or not resolved.startswith(("https://", "http://"))
                                 or not resolved.split("?", 1)[0].endswith(".tgz")):
        raise Refused(f"{path}: resolved {resolved!r} is not a registry tarball")
    integrity = entry.get("integrity")
    if not isinstance(integrity, str):
        raise Refused(f"{path} has no integrity hash")
    return Package(path, name, version, parse_integrity(integrity), integrity, _bins(path, entry),
                   bool(entry.get("hasInstallScript")))


def plan(lockfile: bytes) -> Tree:
    """The tree `lockfile` (``package-lock.json``, lockfileVersion 2 or 3) determines, or :class:`Refused`."""
    if len(lockfile) > MAX_LOCKFILE_BYTES:
        raise Refused(f"the lockfile is over {MAX_LOCKFILE_BYTES} bytes")
    try:
        document = json.loads(lockfile)
    except ValueError as err:
        raise Refused(f"the lockfile is not JSON: {err}") from None
    if not isinstance(document, dict) or document.get("lockfileVersion") not in (2, 3):
        raise Refused("only lockfileVersion 2 and 3 (npm 7 and later) are supported")
    entries = document.get("packages")
    if not isinstance(entries, dict) or not isinstance(entries.get(""), dict):
        raise Refused("the lockfile has no packages section with a root entry")
    packages: list[Package] = []
    skipped: list[str] = []
    for path, entry in sorted(entries.items()):
        if path == "":
            continue
        if not isinstance(entry, dict):
            raise Refused(f"{path!r} is not an entry")
        if not path.startswith("node_modules/"):
            raise Refused(f"{path} is outside node_modules (an npm workspace)")
        if entry.get("inBundle"):
            if entry.get("bin") or entry.get("hasInstallScript"):
                raise Refused(f"{path} is bundled in its parent and has bin links or install scripts")
            continue  # shipped inside its parent's tarball
        if not _platform_ok(entry):
            if entry.get("optional"):
                skipped.append(path)
                continue
            raise Refused(f"{path} is for another platform than {'/'.join(PLATFORM)}")
        packages.append(_package(path, entry))
    if not packages:
        raise Refused("the lockfile installs no package")
    identity = [FORMAT, [[p.path, p.name, p.version, p.integrity.text, list(map(list, p.bins))]
                         for p in packages]]
    key = hashlib.sha256(json.dumps(identity, separators=(",", ":")).encode()).hexdigest()
    return Tree(key, tuple(packages), dict(entries[""]), tuple(skipped))


def member_path(package: Package, member: str) -> str | None:
    """Where a tarball member goes in the tree: its first folder (``package/``, whatever it is called) replaced by
    the package's path; None for a member that would leave the package (absolute, ``..``) or is the folder itself."""
    parts = member.replace("\\", "/").split("/")
    rest = [p for p in parts[1:] if p not in ("", ".")]
    if not rest or member.startswith("/") or ".." in rest:
        return None
    return f"{package.path}/{'/'.join(rest)}"


def bin_links(package: Package) -> list[tuple[str, str, str]]:
    """``(link path, relative target, executable member)`` of each bin of `package`."""
    links = []
    for name, target in package.bins:
        link = f"{package.bin_dir}/{name}"
        executable = f"{package.path}/{target}"
        links.append((link, posixpath.relpath(executable, posixpath.dirname(link)), executable))
    return links


def root_matches(root: dict[str, Any], manifest: dict[str, Any]) -> bool:
    """Whether the lockfile's root entry says what `manifest` (package.json) asks for: npm would otherwise
    re-resolve, so a stale lockfile is never taken as the tree."""
    fields = ("dependencies", "devDependencies", "optionalDependencies", "peerDependencies")
    return all((root.get(f) or {}) == (manifest.get(f) or {}) for f in fields)
