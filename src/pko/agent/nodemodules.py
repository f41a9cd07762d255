"""Install a Node.js project's ``node_modules`` from the operator's dependency cache in one unpack, instead of
``npm install``, when its ``package-lock.json`` says exactly what to install.

Why: ``npm install`` was most of a workspace pod's cold start (11 of 21 s for a TypeScript program with the
Kubernetes SDK, with every tarball already in the cache), and a fleet's pods all did it at once. The cache builds
the tree a lockfile determines once (:mod:`pko.depcache.npmtree`); a pod unpacks it, runs the install scripts the
lockfile names (``npm rebuild <those packages>``, as ``npm ci`` would have run them), and the Pulumi CLI then
installs only the plugins (``pulumi install --no-dependencies``).

Used only when it gives what ``npm install`` would: the operator offers trees (:data:`routes.NPM_TREE_ENV`), the
project's npm registry is that cache's (a Stack with its own registry keeps its own), the project uses npm with a
current lockfile (its root entry asks for what package.json asks for) and no install scripts of its own, has no
``node_modules`` yet, and runs on the platform trees are built for (linux/x64, glibc). Anything
else, or any failure on the way, returns the reason and the caller runs ``pulumi install`` as before: the tree is
a shortcut, never a new way to fail. The unpack goes to a temporary folder renamed into place, under the agent's
own rules (:func:`checked_name`: nothing outside ``node_modules``, no device files, no link leaving it, nothing
written through a link).
"""

from __future__ import annotations

import asyncio
import functools
import glob
import hashlib
import io
import json
import logging
import os
import posixpath
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from pko.depcache import npmtree, routes

log = logging.getLogger(__name__)
T = TypeVar("T")

LOCKFILE = "package-lock.json"
OTHER_LOCKFILES = ("yarn.lock", "pnpm-lock.yaml", "bun.lock", "bun.lockb")
#: Long enough for the first pod of a fleet to wait while the cache builds the tree from its upstream.
TIMEOUT = 600.0
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Offer:
    """A tree the cache will build for this project: where to ask, the lockfile, what it plans."""

    url: str
    lockfile: bytes
    tree: npmtree.Tree


def _runtime(project: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    runtime = project.get("runtime")
    if isinstance(runtime, str):
        return runtime, {}
    if isinstance(runtime, dict):
        options = runtime.get("options")
        return str(runtime.get("name", "")), options if isinstance(options, dict) else {}
    return "", {}


def offered(env: Mapping[str, str]) -> bool:
    """Whether the operator offers npm trees to this workspace (its dependency cache has an npm upstream)."""
    return bool(env.get(routes.NPM_TREE_ENV))


#: The project's own scripts that ``npm install`` runs and an unpacked tree would not.
ROOT_SCRIPTS = ("preinstall", "install", "postinstall", "preprepare", "prepare", "postprepare")


def platform_reason(machine: str | None = None, musl: bool | None = None) -> str | None:
    """Why this workspace's platform is not the one trees are built for (:data:`npmtree.PLATFORM`), or None."""
    machine = machine if machine is not None else os.uname().machine
    musl = musl if musl is not None else bool(glob.glob("/lib/ld-musl-*"))
    if machine not in ("x86_64", "amd64"):
        return f"trees are built for linux/x64, this workspace is {machine}"
    if musl:
        return "trees are built for glibc, this workspace's libc is musl"
    return None


def offer(workdir: Path, project: Mapping[str, Any], env: Mapping[str, str]) -> Offer | str:
    """The :class:`Offer` for this workspace, or why the tree is not used (the caller runs ``pulumi install``)."""
    url = env.get(routes.NPM_TREE_ENV, "")
    if not url:
        return "the operator offers no npm trees"
    elsewhere = platform_reason()
    if elsewhere:
        return elsewhere
    name, options = _runtime(project)
    if name != "nodejs":
        return f"the project's runtime is {name or 'unknown'}, not nodejs"
    manager = str(options.get("packagemanager") or "auto")
    if manager not in ("npm", "auto"):
        return f"the project uses {manager}"
    registry = (env.get("NPM_CONFIG_REGISTRY") or env.get("npm_config_registry") or "").rstrip("/")
    if registry != url.rsplit("/", 1)[0] + "/" + routes.NPM:
        return "the project's npm registry is not the dependency cache's"
    if (workdir / "node_modules").exists():
        return "node_modules is already there"
    if not (workdir / LOCKFILE).is_file():
        return f"the project has no {LOCKFILE}"
    if manager == "auto" and any((workdir / other).exists() for other in OTHER_LOCKFILES):
        return "the project has another package manager's lockfile"
    try:
        manifest = json.loads((workdir / "package.json").read_text())
        lockfile = (workdir / LOCKFILE).read_bytes()
        tree = npmtree.plan(lockfile)
    except (OSError, ValueError) as err:  # Refused is a ValueError
        return f"{LOCKFILE} cannot be used as it is: {err}"
    if not isinstance(manifest, dict) or not npmtree.root_matches(tree.root, manifest):
        return f"{LOCKFILE} is not current with package.json"
    scripts = manifest.get("scripts")
    own = [name for name in ROOT_SCRIPTS if isinstance(scripts, dict) and name in scripts]
    if own:
        return f"package.json has its own install scripts ({', '.join(own)}), which npm install runs"
    return Offer(url, lockfile, tree)


#: The folder a tree is unpacked into before it is renamed into place (in the program's folder: the same volume).
STAGING_PREFIX = ".pko-node-modules-"


def unpack(found: Offer, workdir: Path, timeout: float = TIMEOUT) -> int:
    """Ask the cache for the tree and unpack it as ``workdir/node_modules``; the bytes received. Blocking. What an
    unpack killed midway left (an agent OOM-killed, its container restarted in the same pod) goes first: a second
    ``node_modules`` in the program's folder makes every later install walk it and install plugins again."""
    for left in workdir.glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(left, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=workdir))
    try:
        request = urllib.request.Request(found.url, data=found.lockfile, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            counted = _Counting(answer)
            with tarfile.open(fileobj=counted, mode="r|gz") as archive:
                extract(archive, staging)
            counted.whole(answer.headers.get("Content-Length"), answer.headers.get("X-Content-Sha256"))
        (staging / "node_modules").rename(workdir / "node_modules")
        return counted.count
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class UnsafeMember(ValueError):
    """A tree member that would land outside ``node_modules``, or is neither a file, a folder nor a local link."""


def checked_name(member: tarfile.TarInfo) -> str:
    """`member`'s path, normalised, refusing anything outside ``node_modules`` (a relative link must point inside
    it too, with ``..`` only at its start, as bin links are). The agent's own rule, not tarfile's ``data`` filter:
    the agent's Python may predate it."""
    name = posixpath.normpath(member.name)
    parts = name.split("/")
    if member.name.startswith("/") or parts[0] != "node_modules" or ".." in parts:
        raise UnsafeMember(f"{member.name!r} is outside node_modules")
    if member.issym():
        target = posixpath.normpath(posixpath.join(posixpath.dirname(name), member.linkname))
        parts = member.linkname.split("/")
        inner = parts[next((i for i, p in enumerate(parts) if p != ".."), len(parts)):]
        if member.linkname.startswith("/") or target.split("/")[0] != "node_modules" or ".." in inner:
            raise UnsafeMember(f"{member.name!r} links outside node_modules")
    elif not (member.isfile() or member.isdir()):
        raise UnsafeMember(f"{member.name!r} is not a file, a folder or a link")
    return name


def extract(archive: tarfile.TarFile, root: Path) -> None:
    """Unpack a tree read as a stream into `root` (made empty here): files 0644 (0755 when executable), links as
    they are, nothing made or written through a link (every member's folders must be folders this unpack made).

    Why no path is resolved: a tree of the Kubernetes SDK is some 14,000 members, and resolving two paths for each
    (a ``stat`` per component) was a second of a cold start. The folder starts empty, so the only links in it are
    the tree's own, which this unpack remembers; a member below one of them is refused, and a link's target, checked
    by :func:`checked_name` to stay inside ``node_modules`` with ``..`` only at its start, is then taken from a
    real folder, so no chain of links leaves ``node_modules`` either. Paths are joined as strings, and a member
    whose folder this unpack already made skips the walk up its folders: no folder made here is, or is below, a
    link (a link never replaces a folder, a folder is never made at or through a link), so only a new folder's
    path needs the look for links above it (in a profile of a synthetic tree the walk up every member's folders
    was 15% of the unpack; on tmpfs the Kubernetes program's tree unpacks about a tenth faster)."""
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise UnsafeMember(f"{root} is not empty")
    base = os.fspath(root)
    folders: set[str] = {""}  # relative paths this unpack made as folders ("" is root)
    links: set[str] = set()
    for member in archive:
        name = checked_name(member)
        target = f"{base}/{name}"
        parent = posixpath.dirname(name)
        if parent not in folders:
            if _below(parent, links):
                raise UnsafeMember(f"{member.name!r} would be written through a link")
            _folders(base, parent, folders)
        if member.isdir():
            if name in links:
                raise UnsafeMember(f"{member.name!r} would be written through a link")
            if name not in folders:
                os.mkdir(target)
                folders.add(name)
            continue
        if name in folders:
            raise UnsafeMember(f"{member.name!r} would replace a folder")
        if member.issym():
            _make(functools.partial(os.symlink, member.linkname, target), target, links, name)
            links.add(name)
            continue
        source = archive.extractfile(member)
        if source is None:
            raise UnsafeMember(f"{member.name!r} has no content")
        mode = 0o755 if member.mode & 0o111 else 0o644
        handle = _make(functools.partial(os.open, target, _NEW_FILE, mode), target, links, name)
        try:
            os.fchmod(handle, mode)  # whatever the umask
            _copy(source, handle)
        finally:
            os.close(handle)


def _copy(source: IO[bytes], handle: int) -> None:
    """Write what `source` holds to file descriptor `handle` (most of a tree's files are a few kB: one read)."""
    while chunk := source.read(_CHUNK):
        view = memoryview(chunk)
        while view:
            view = view[os.write(handle, view):]


def _below(path: str, links: set[str]) -> bool:
    """Whether relative `path` is, or is inside, one of `links`."""
    if not links:
        return False
    while path:
        if path in links:
            return True
        path = posixpath.dirname(path)
    return False


def _folders(base: str, path: str, folders: set[str]) -> None:
    """Make relative folder `path` and the folders above it that this unpack has not made yet."""
    missing: list[str] = []
    while path not in folders:
        missing.append(path)
        path = posixpath.dirname(path)
    for folder in reversed(missing):
        try:  # the root started empty and the folders made here are known: only a file of the tree can be there
            os.mkdir(f"{base}/{folder}")
        except FileExistsError:
            raise UnsafeMember(f"{folder!r} is a file of the tree, not a folder") from None
        folders.add(folder)


def _make(make: Callable[[], T], target: str, links: set[str], name: str) -> T:
    """Make `target`; when a member of the same name came before, the later one wins, as with tar."""
    try:
        return make()
    except FileExistsError:
        os.unlink(target)  # a folder stays: unlink refuses it
        links.discard(name)
        return make()


async def install(workdir: Path, project: Mapping[str, Any], env: Mapping[str, str]) -> Offer | str:
    """Unpack the cache's tree for this project: the :class:`Offer` it came from, or why it was not used."""
    try:
        found = offer(workdir, project, env)
    except Exception as err:  # a lockfile too deep to parse, an unreadable file: install as before
        return f"the project's files could not be read: {type(err).__name__}: {err}"
    if isinstance(found, str):
        return found
    try:
        size = await asyncio.to_thread(unpack, found, workdir)
    except urllib.error.HTTPError as err:
        try:
            detail = err.read(2048).decode(errors="replace").strip()
        except OSError:
            detail = err.reason if isinstance(err.reason, str) else ""
        return f"the dependency cache answered {err.code}: {detail}"
    except Exception as err:  # the tree is a shortcut: any failure means installing as before
        shutil.rmtree(workdir / "node_modules", ignore_errors=True)
        return f"the npm tree could not be unpacked: {type(err).__name__}: {err}"
    log.info("unpacked the dependency cache's npm tree %s (%d packages, %.1f MB)", found.tree.key[:12],
             len(found.tree.packages), size / 1e6)
    return found


class CutShort(ValueError):
    """The cache's answer ended before the length it announced, or is not the blob whose digest it announced."""


class _Counting(io.BufferedIOBase):
    """A readable stream that counts and hashes its bytes, so that a tree whose answer was cut short is never taken
    for a whole one: an answer of a known length that the connection ends early reads as a clean end (the standard
    library's client returns no bytes rather than failing), and an archive cut between two members unpacks without
    an error."""

    def __init__(self, raw: Any) -> None:
        super().__init__()
        self.raw = raw
        self.count = 0
        self._digest = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        data: bytes = self.raw.read(-1 if size is None else size)
        self.count += len(data)
        self._digest.update(data)
        return data

    def whole(self, length: str | None, digest: str | None) -> None:
        """Read what is left after the archive's end, then check the answer against the length and the digest it
        announced (a tree answered while it is built has neither: a cut there fails the chunked read itself).
        Raises :class:`CutShort`."""
        while self.read(1 << 16):
            pass
        if length is not None and length.strip().isdigit() and self.count != int(length):
            raise CutShort(f"the npm tree's answer ended after {self.count} of {int(length)} bytes")
        if digest and self._digest.hexdigest() != digest.strip().lower():
            raise CutShort("the npm tree's answer is not the blob its digest names")
