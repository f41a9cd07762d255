"""Checking out one revision of a git repository into a directory, with the reference agent's auth options.

Used by ``agent init --git-url --git-revision`` (and later by the Stack controller to resolve a branch to a commit).
The revision is a commit SHA (as the operator passes it), or a branch or tag name. ``shallow`` fetches only that
commit (depth 1); when the server refuses an unadvertised commit, the whole history is fetched instead. Auth mirrors
the reference's ``GIT_*`` variables: HTTP basic (username/password), a token (sent as basic auth with user ``git``),
or an SSH private key (host keys are not checked, as the reference does not check them either); a GitHub App token
arrives here as basic auth with user ``x-access-token``.

Built on dulwich (no git binary); SSH is spoken in-process (:mod:`pko.sources.ssh`: pko's image has no ``ssh``, and a
workspace pod's UID has no passwd entry for one). It must never log a password, token or key, nor write a key to
disk.

A repository URL is user input that reaches a network client and, for SSH, a command line, so :func:`check_url`
accepts only remote transports (``http``, ``https``, ``ssh``, ``git`` and scp-like ``user@host:path``): no local
path or ``file://`` (that would read the operator's or agent's own disk), no ``<transport>::`` remote helper such
as ``ext::`` (a command), nothing starting with ``-`` (an option to whatever runs it), no control characters. And a
server that accepts a connection and never answers must not hang the caller: every transport gets ``timeout``
(HTTP's read timeout, the socket of ``git://``, SSH's connect, handshake and read timeouts).

Nor may a huge repository, or a server streaming a pack without end, fill the disk it is fetched to: a checkout has
one size cap (:func:`max_fetch_size`, ``GIT_MAX_FETCH_SIZE_BYTES``, default 1 GiB, ``-1`` for none) on both the pack
bytes received (counted as they arrive; the fetch is aborted as soon as they pass the cap) and the files of the
checked-out tree (their sizes are added up before anything is written). A failed checkout removes what it created,
so that a restarted init never takes a half-fetched ``.git`` for a checkout.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import shutil
import socket
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:  # dulwich is imported by what talks to a remote: an operator without Git sources never loads it
    from dulwich import client as git_client
    from dulwich.objects import Commit
    from dulwich.repo import Repo

log = logging.getLogger("pko.sources.git")

_SHA = re.compile(r"^[0-9a-fA-F]{40}$")
DEFAULT_TIMEOUT = 60.0  # seconds a remote may stay silent before we give up on it
REMOTE_SCHEMES = ("http", "https", "ssh", "git", "git+ssh", "ssh+git")
MAX_FETCH_SIZE_ENV = "GIT_MAX_FETCH_SIZE_BYTES"
DEFAULT_MAX_FETCH_SIZE = 1024 * 1024 * 1024
UNLIMITED = -1  # a size cap of -1: none
_SCP_LIKE = re.compile(r"^(?:[\w.+-]+@)?(?P<host>[\w.-]+|\[[0-9A-Fa-f:.]+\]):(?P<path>[^:].*)$")


class GitError(Exception):
    """The repository could not be fetched or the revision not found."""


class AlreadyCheckedOutError(GitError):
    """The target directory already holds a repository (left by an earlier run)."""


@dataclass(frozen=True)
class GitAuth:
    """Credentials for a remote; empty fields are unused. ``repr`` never shows a secret."""

    username: str = ""
    password: str = ""
    token: str = ""
    ssh_private_key: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> GitAuth:
        """From ``GIT_USERNAME``, ``GIT_PASSWORD``, ``GIT_TOKEN`` and ``GIT_SSH_PRIVATE_KEY``."""
        return cls(env.get("GIT_USERNAME", ""), env.get("GIT_PASSWORD", ""), env.get("GIT_TOKEN", ""),
                   env.get("GIT_SSH_PRIVATE_KEY", ""))

    def __repr__(self) -> str:
        kinds = [k for k in ("username", "password", "token", "ssh_private_key") if getattr(self, k)]
        return f"GitAuth({', '.join(kinds) or 'none'})"


class TooLargeError(GitError):
    """The repository's pack or checked-out tree is larger than the size cap."""


def max_fetch_size(env: Mapping[str, str]) -> int:
    """The size cap of a checkout from ``GIT_MAX_FETCH_SIZE_BYTES``: a number of bytes (default 1 GiB), or ``-1``
    (:data:`UNLIMITED`) for none. Anything else is refused (:class:`GitError`) rather than read as no cap: a typo
    must not silently remove the protection."""
    raw = env.get(MAX_FETCH_SIZE_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_FETCH_SIZE
    try:
        value = int(raw, 10)
    except ValueError:
        value = None
    if value is None or value < UNLIMITED:
        raise GitError(f"invalid {MAX_FETCH_SIZE_ENV} {raw[:40]!r}: expected a number of bytes, or -1 for no cap")
    return value


class _Budget:
    """The bytes a checkout may still take; :meth:`take` refuses (:class:`TooLargeError`) once the total passes
    the cap, so a fetch stops at the first chunk over it rather than after downloading everything."""

    def __init__(self, cap: int, url: str) -> None:
        self.cap, self.url, self.received = cap, url, 0

    def take(self, size: int) -> None:
        self.received += size
        if self.cap != UNLIMITED and self.received > self.cap:
            raise TooLargeError(f"{redact(self.url)} sent more than {self.cap} bytes of pack data, the size cap "
                                f"({MAX_FETCH_SIZE_ENV}); the fetch was aborted")


def _capped(client: Any, budget: _Budget) -> Any:
    """`client` with every pack byte it receives counted against `budget`. Why wrap ``fetch_pack``: dulwich's
    ``fetch`` writes the pack through the ``pack_data`` callback it gives ``fetch_pack`` (to a spool or pack file
    it aborts on an exception), for every network transport; wrapping that callback sees each chunk before it is
    written and leaves dulwich's own clean-up in place."""
    fetch_pack = client.fetch_pack

    def capped_fetch_pack(path: Any, determine_wants: Any, graph_walker: Any, pack_data: Any, *args: Any,
                          **kwargs: Any) -> Any:
        def write(data: bytes) -> None:
            budget.take(len(data))
            pack_data(data)

        return fetch_pack(path, determine_wants, graph_walker, write, *args, **kwargs)

    client.fetch_pack = capped_fetch_pack
    return client


def _check_tree_size(repo: Repo, commit: Commit, cap: int, url: str) -> None:
    """Refuse (:class:`TooLargeError`) a commit whose files add up to more than `cap` bytes, before any is written:
    the pack is compressed, so a small pack can still unpack to a tree larger than the disk."""
    if cap == UNLIMITED:
        return
    from dulwich.objects import S_ISGITLINK

    total = 0
    for entry in repo.object_store.iter_tree_contents(commit.tree):
        if entry.mode is None or entry.sha is None or S_ISGITLINK(entry.mode):
            continue  # a submodule: not checked out
        total += len(repo.object_store.get_raw(entry.sha)[1])
        if total > cap:
            raise TooLargeError(f"the files of {redact(url)} at {commit.id.decode()[:12]} add up to more than {cap} "
                                f"bytes, the size cap ({MAX_FETCH_SIZE_ENV}); nothing was checked out")


def _discard(target: Path, was_empty: bool) -> None:
    """Remove what a failed checkout wrote into `target` (everything, when it was empty before; else its
    ``.git``), so that a later run does not take it for a finished checkout."""
    if was_empty:
        for child in target.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
    else:
        shutil.rmtree(target / ".git", ignore_errors=True)


class UnsupportedURLError(GitError):
    """The repository URL names a local path, a command or an option rather than a remote repository."""


def check_url(url: str, *, allow_local: bool = False) -> None:
    """Refuse (:class:`UnsupportedURLError`) a repository URL that is not a remote repository over a known transport.
    `allow_local`: a ``file://`` URL or a path is accepted too (the agent's ``init`` inside a workspace pod, as the Go
    agent accepts them: that disk is the pod's own), the other rules still apply.

    Why: the URL comes from a Stack's spec; dulwich would treat a bare path or ``file://`` as a repository on this
    machine's disk, ``ext::<command>`` as an scp-like host called ``ext``, and an SSH host starting with ``-`` is an
    option to ``ssh`` (CVE-2017-1000117's shape)."""
    what = f"unsupported git repository URL {redact(url)!r}"
    if not url or url != url.strip() or any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise UnsupportedURLError(f"{what}: empty, or has whitespace or control characters")
    if url.startswith("-"):
        raise UnsupportedURLError(f"{what}: it starts with '-'")
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*::", url):
        raise UnsupportedURLError(f"{what}: remote helpers ('<transport>::') are not supported")
    scheme, sep, rest = url.partition("://")
    if allow_local and ((sep and scheme.lower() == "file") or (not sep and url.startswith(("/", "./", "../")))):
        return
    if sep:
        if scheme.lower() not in REMOTE_SCHEMES:
            raise UnsupportedURLError(f"{what}: scheme {scheme!r} is not one of {', '.join(REMOTE_SCHEMES)}")
        host = rest.split("/", 1)[0].rsplit("@", 1)[-1]
        if not host or host.startswith("-"):
            raise UnsupportedURLError(f"{what}: no host, or a host starting with '-'")
        return
    match = _SCP_LIKE.match(url)
    if match is None or match.group("host").startswith("-"):
        raise UnsupportedURLError(f"{what}: not a remote repository (local paths are not supported)")


def _is_ssh(url: str) -> bool:
    return url.startswith(("ssh://", "git+ssh://", "ssh+git://")) or bool(re.match(r"^[\w.-]+@[\w.-]+:", url))


@contextlib.contextmanager
def _client(url: str, auth: GitAuth, timeout: float = DEFAULT_TIMEOUT, *, allow_local: bool = False
            ) -> Iterator[tuple[Any, str]]:
    """A dulwich client and the remote path, with any SSH key in a private temporary file; every transport gives up
    on a remote silent for `timeout` seconds."""
    check_url(url, allow_local=allow_local)
    from dulwich import client as git_client
    from dulwich.config import ConfigDict

    if _is_ssh(url):
        from pko.sources import ssh  # paramiko and cryptography: only what an SSH remote needs loads them

        try:
            key = ssh.load_key(auth.ssh_private_key, auth.password) if auth.ssh_private_key else None
        except ssh.SSHKeyError as err:
            raise GitError(str(err)) from None
        client: Any
        client, path = git_client.get_transport_and_path(url)
        client.ssh_vendor = ssh.Vendor(key, timeout)
        if not getattr(client, "username", None):
            client.username = "git"
        yield client, path
        return
    username, password = None, None
    if auth.token:
        username, password = "git", auth.token
    elif auth.username or auth.password:
        username, password = auth.username or "git", auth.password
    config = ConfigDict()
    config.set((b"http",), b"timeout", str(timeout).encode())
    client, path = git_client.get_transport_and_path(url, config=config, username=username, password=password)
    if isinstance(client, git_client.TCPGitClient):
        client = _timed_tcp_client(client, timeout)
    yield client, path


def _timed_tcp_client(client: git_client.TCPGitClient, timeout: float) -> git_client.TCPGitClient:
    """`client` (``git://``) with a socket that times out: dulwich's blocks forever on a server that accepts and
    never answers."""
    cls = _timed_tcp_class()
    timed = cls.__new__(cls)
    timed.__dict__.update(client.__dict__)
    timed.timeout = timeout
    return cast("git_client.TCPGitClient", timed)


@functools.cache
def _timed_tcp_class() -> Any:
    """The ``TCPGitClient`` whose connection uses its `timeout` (made once dulwich is loaded)."""
    from dulwich import client as git_client

    class TimedTCPGitClient(git_client.TCPGitClient):
        timeout: float = DEFAULT_TIMEOUT

        def _connect(self, cmd: bytes, path: str | bytes, protocol_version: int | None = None) -> Any:
            previous = socket.getdefaulttimeout()
            with _DEFAULT_TIMEOUT_LOCK:  # dulwich makes its socket inside; the default applies to sockets made now
                socket.setdefaulttimeout(self.timeout)
                try:
                    return super()._connect(cmd, path, protocol_version)
                finally:
                    socket.setdefaulttimeout(previous)

    return TimedTCPGitClient


_DEFAULT_TIMEOUT_LOCK = threading.Lock()


def resolve(refs: Mapping[bytes, bytes | None], revision: str) -> bytes | None:
    """The commit a revision names among a remote's refs: a ref name, branch, tag, or full SHA."""
    candidates = [revision, f"refs/heads/{revision}", f"refs/tags/{revision}", f"refs/remotes/origin/{revision}"]
    for name in candidates:
        peeled = refs.get(f"{name}^{{}}".encode())
        if peeled:
            return peeled
        sha = refs.get(name.encode())
        if sha:
            return sha
    if _SHA.match(revision):
        return revision.lower().encode()
    for sha in refs.values():  # an abbreviated SHA of an advertised tip
        if sha and len(revision) >= 7 and sha.decode().startswith(revision.lower()):
            return sha
    return None


def _peel(repo: Repo, sha: bytes) -> Commit:
    from dulwich.objects import Commit, Tag

    obj = repo[sha]
    while isinstance(obj, Tag):
        obj = repo[obj.object[1]]
    if not isinstance(obj, Commit):
        raise GitError(f"{sha.decode()} is not a commit")
    return obj


def checkout(url: str, revision: str, target: Path, auth: GitAuth = GitAuth(), shallow: bool = False,
             timeout: float = DEFAULT_TIMEOUT, *, allow_local: bool = False,
             max_size: int = DEFAULT_MAX_FETCH_SIZE) -> str:
    """Fetch `revision` of `url` into `target` (created if needed) and check it out; return the commit SHA.
    `max_size` caps both the pack bytes received and the checked-out files (:data:`UNLIMITED`: no cap); on any
    failure, what was written into `target` is removed."""
    if (target / ".git").exists():
        raise AlreadyCheckedOutError(f"repository already exists in {target}")
    check_url(url, allow_local=allow_local)
    from dulwich.objects import ObjectID
    from dulwich.repo import Repo

    target.mkdir(parents=True, exist_ok=True)
    was_empty = not any(target.iterdir())
    with _client(url, auth, timeout, allow_local=allow_local) as (client, path):
        try:
            refs = dict(client.get_refs(path).refs)
        except Exception as err:  # dulwich raises many kinds: protocol, HTTP status, auth, OS errors
            raise GitError(f"unable to list the refs of {redact(url)}: {err}") from err
        sha = resolve(refs, revision)
        if sha is None:
            raise GitError(f"revision {revision!r} not found in {redact(url)}")
        repo = Repo.init(str(target))
        try:
            _fetch(_capped(client, _Budget(max_size, url)), path, repo, sha, refs, shallow)
            commit = _peel(repo, sha)
            _check_tree_size(repo, commit, max_size, url)
            repo.get_config().set((b"remote", b"origin"), b"url", redact(url).encode())
            repo.get_config().write_to_path()
            for name, ref_sha in refs.items():
                if name.startswith(b"refs/heads/") and ref_sha and ObjectID(ref_sha) in repo.object_store:
                    repo.refs[b"refs/remotes/origin/" + name[len(b"refs/heads/"):]] = ref_sha
            (target / ".git" / "HEAD").write_text(commit.id.decode() + "\n")  # a detached HEAD, as git writes it
            repo.get_worktree().reset_index(commit.tree)
        except BaseException:
            repo.close()
            _discard(target, was_empty)
            raise
        repo.close()
    log.info("checked out %s at %s", redact(url), commit.id.decode())
    return commit.id.decode()


def _fetch(client: Any, path: str, repo: Repo, sha: bytes, refs: Mapping[bytes, bytes | None],
           shallow: bool) -> None:
    from dulwich.errors import GitProtocolError, HangupException
    from dulwich.objects import ObjectID

    depth = 1 if shallow else None

    def wants(_refs: Any, depth: int | None = None) -> list[bytes]:
        return [sha]

    try:
        result = client.fetch(path, repo, determine_wants=wants, depth=depth)
    except (GitProtocolError, HangupException) as err:
        if sha in refs.values():
            raise GitError(f"unable to fetch {sha.decode()}: {err}") from err
        # The server does not serve unadvertised commits: fetch every ref's full history and look there.
        log.info("the server refused commit %s by id; fetching all refs", sha.decode())
        result = client.fetch(path, repo)
    repo.update_shallow(result.new_shallow, result.new_unshallow)
    if ObjectID(sha) not in repo.object_store:
        raise GitError(f"commit {sha.decode()} not found in the repository")


def redact(url: str) -> str:
    """The URL without a password (``https://user:pass@host`` → ``https://user@host``)."""
    return re.sub(r"(://[^/@:]*):[^/@]*@", r"\1@", url)

