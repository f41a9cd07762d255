"""`pko agent init` fills a workspace from a real git server on loopback (commit, branch head, shallow, basic auth,
SSH key), from a Flux-style artifact over HTTP (digest checked, unsafe or oversize archives refused), or writes
just the project file — always through the command line, as the workspace pod's init container runs it."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import subprocess
import tarfile
import threading
import uuid
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from agent_testlib import AGENT_COMMAND

from pko.testing import gitserver

PROJECT = "name: from-git\nruntime: yaml\noutputs:\n  where: git\n"


class Result:
    def __init__(self, completed: subprocess.CompletedProcess[str]):
        self.code = completed.returncode
        self.output = completed.stdout + completed.stderr


async def init(*args: str, env: dict[str, str] | None = None, command: Sequence[str] = AGENT_COMMAND) -> Result:
    def run() -> Result:
        return Result(subprocess.run([*command, "init", *args], capture_output=True, text=True, env=env,
                                     check=False, timeout=300))
    return await asyncio.to_thread(run)


@pytest.fixture(scope="module")
def repo(git_server: gitserver.GitServer) -> dict[str, str]:
    """A repository with two commits on main and a feature branch; the name is unique per module run."""
    name = f"project-{uuid.uuid4().hex[:6]}"
    first = git_server.create_repo(name, {"Pulumi.yaml": PROJECT, "stacks/app/Pulumi.yaml": "name: app\n"},
                                   allow_any_sha=False)
    second = git_server.commit(name, {"VERSION": "2\n"})
    feature = git_server.commit(name, {"FEATURE": "yes\n"}, branch="feature", base="main")
    return {"name": name, "first": first, "second": second, "feature": feature}


async def git_log(checkout: Path) -> list[str]:
    """The commits real git sees in a checkout (it must accept what dulwich wrote, shallow file included)."""
    def run() -> list[str]:
        log = subprocess.run(["git", "-C", str(checkout), "log", "--format=%H"], capture_output=True, text=True,
                             check=True)
        return log.stdout.split()
    return await asyncio.to_thread(run)


def head(target: Path) -> str:
    return (target / ".git" / "HEAD").read_text().strip()


async def test_git_commit_and_branch_head(tmp_path: Path, git_server: gitserver.GitServer,
                                          repo: dict[str, str]) -> None:
    at_commit = await init("-t", str(tmp_path / "a"), "--git-url", git_server.http_url(repo["name"]),
                           "--git-revision", repo["first"])
    assert at_commit.code == 0, at_commit.output
    assert head(tmp_path / "a") == repo["first"]
    assert (tmp_path / "a" / "Pulumi.yaml").read_text() == PROJECT
    assert (tmp_path / "a" / "stacks" / "app" / "Pulumi.yaml").exists()
    assert not (tmp_path / "a" / "VERSION").exists()

    at_branch = await init("-t", str(tmp_path / "b"), "--git-url", git_server.git_url(repo["name"]),
                           "--git-revision", "feature")
    assert at_branch.code == 0, at_branch.output
    assert head(tmp_path / "b") == repo["feature"]
    assert (tmp_path / "b" / "FEATURE").read_text() == "yes\n"
    assert (tmp_path / "b" / "VERSION").read_text() == "2\n"

    again = await init("-t", str(tmp_path / "b"), "--git-url", git_server.git_url(repo["name"]),
                       "--git-revision", "feature")
    assert again.code == 0, again.output  # a restarted init container finds its checkout and succeeds
    assert "previously checked out" in again.output


async def test_git_shallow(tmp_path: Path, git_server: gitserver.GitServer, repo: dict[str, str],
                           pulumi_env: dict[str, str]) -> None:
    env = {**pulumi_env, "GIT_SHALLOW": "true"}
    shallow = await init("-t", str(tmp_path / "s"), "--git-url", git_server.http_url(repo["name"]),
                         "--git-revision", repo["second"], env=env)
    assert shallow.code == 0, shallow.output
    assert (tmp_path / "s" / ".git" / "shallow").read_text().split() == [repo["second"]]
    assert await git_log(tmp_path / "s") == [repo["second"]]  # only the one commit was fetched

    old = await init("-t", str(tmp_path / "o"), "--git-url", git_server.http_url(repo["name"]),
                     "--git-revision", repo["first"], env=env)  # not a branch tip: the server refuses it by id
    assert old.code == 0, old.output
    assert head(tmp_path / "o") == repo["first"]


async def test_git_basic_auth(tmp_path: Path, git_server: gitserver.GitServer, pulumi_env: dict[str, str]) -> None:
    name = f"private-{uuid.uuid4().hex[:6]}"
    commit = git_server.create_repo(name, {"Pulumi.yaml": PROJECT})
    git_server.protect(name, "robot", "hunter2")
    url = git_server.http_url(name)

    anonymous = await init("-t", str(tmp_path / "x"), "--git-url", url, "--git-revision", commit, env=pulumi_env)
    assert anonymous.code != 0
    assert "unable to fetch git source" in anonymous.output

    env = {**pulumi_env, "GIT_USERNAME": "robot", "GIT_PASSWORD": "hunter2"}
    allowed = await init("-t", str(tmp_path / "y"), "--git-url", url, "--git-revision", commit, env=env)
    assert allowed.code == 0, allowed.output
    assert head(tmp_path / "y") == commit
    assert "hunter2" not in allowed.output

    git_server.protect(name, "git", "token-123")
    with_token = await init("-t", str(tmp_path / "z"), "--git-url", url, "--git-revision", commit,
                            env={**pulumi_env, "GIT_TOKEN": "token-123"})
    assert with_token.code == 0, with_token.output


async def test_git_ssh_key(tmp_path: Path, git_server: gitserver.GitServer, repo: dict[str, str],
                           pulumi_env: dict[str, str]) -> None:
    assert git_server.ssh is not None
    url = git_server.ssh_url(repo["name"])
    without_key = await init("-t", str(tmp_path / "n"), "--git-url", url, "--git-revision", repo["second"],
                             env=pulumi_env)
    assert without_key.code != 0

    env = {**pulumi_env, "GIT_SSH_PRIVATE_KEY": git_server.ssh.private_key, "GIT_SHALLOW": "true"}
    with_key = await init("-t", str(tmp_path / "k"), "--git-url", url, "--git-revision", repo["second"], env=env)
    assert with_key.code == 0, with_key.output
    assert head(tmp_path / "k") == repo["second"]
    assert "PRIVATE KEY" not in with_key.output


# --- Flux-style artifacts ----------------------------------------------------------------------------------------


async def test_git_size_cap(tmp_path: Path, git_server: gitserver.GitServer, pulumi_env: dict[str, str]) -> None:
    """``GIT_MAX_FETCH_SIZE_BYTES``: a repository past it is refused with a message naming the cap and the
    variable (and no password), leaving no checkout behind; an invalid value is refused before any connection."""
    name = f"big-{uuid.uuid4().hex[:6]}"
    commit = git_server.create_repo(name, {"Pulumi.yaml": PROJECT, "blob.bin": os.urandom(1024 * 1024)})
    git_server.protect(name, "robot", "hunter2")
    url = git_server.http_url(name)
    auth = {**pulumi_env, "GIT_USERNAME": "robot", "GIT_PASSWORD": "hunter2"}

    refused = await init("-t", str(tmp_path / "x"), "--git-url", url, "--git-revision", commit,
                         env={**auth, "GIT_MAX_FETCH_SIZE_BYTES": "65536"})
    assert refused.code == 1, refused.output
    assert (f"unable to fetch git source: {url} sent more than 65536 bytes of pack data, the size cap "
            "(GIT_MAX_FETCH_SIZE_BYTES); the fetch was aborted") in refused.output
    assert "hunter2" not in refused.output
    assert list((tmp_path / "x").iterdir()) == []

    invalid = await init("-t", str(tmp_path / "y"), "--git-url", url, "--git-revision", commit,
                         env={**auth, "GIT_MAX_FETCH_SIZE_BYTES": "1Gi"})
    assert invalid.code == 1, invalid.output
    assert ("unable to fetch git source: invalid GIT_MAX_FETCH_SIZE_BYTES '1Gi': expected a number of bytes, "
            "or -1 for no cap") in invalid.output
    assert not (tmp_path / "y").exists()

    allowed = await init("-t", str(tmp_path / "x"), "--git-url", url, "--git-revision", commit,
                         env={**auth, "GIT_MAX_FETCH_SIZE_BYTES": str(4 * 1024 * 1024)})
    assert allowed.code == 0, allowed.output
    assert head(tmp_path / "x") == commit
    assert (tmp_path / "x" / "blob.bin").stat().st_size == 1024 * 1024


def tarball(entries: dict[str, bytes], links: dict[str, str] | None = None, names: Sequence[str] = ()) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            archive.addfile(info)
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 1
            archive.addfile(info, io.BytesIO(b"x"))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def artifacts() -> Iterator[tuple[str, dict[str, bytes]]]:
    """An HTTP server (like the source-controller's or the operator's file server) for artifact bytes."""
    served: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            body = served.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "application/gzip")
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", served
    httpd.shutdown()
    httpd.server_close()


def digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


async def test_flux_artifact(tmp_path: Path, artifacts: tuple[str, dict[str, bytes]],
                             pulumi_env: dict[str, str]) -> None:
    base, served = artifacts
    good = tarball({"Pulumi.yaml": PROJECT.encode(), "sub/dir/file.txt": b"content"}, links={"link": "sub/dir"})
    served["/good.tar.gz"] = good

    fetched = await init("-t", str(tmp_path / "good"), "--flux-url", f"{base}/good.tar.gz", "--flux-digest",
                         digest(good), env=pulumi_env)
    assert fetched.code == 0, fetched.output
    assert (tmp_path / "good" / "Pulumi.yaml").read_text() == PROJECT
    assert (tmp_path / "good" / "link" / "file.txt").read_text() == "content"

    tampered = await init("-t", str(tmp_path / "bad-digest"), "--flux-url", f"{base}/good.tar.gz", "--flux-digest",
                          digest(b"something else"), env=pulumi_env)
    assert tampered.code != 0
    assert "computed digest doesn't match" in tampered.output
    assert not any((tmp_path / "bad-digest").iterdir())

    missing = await init("-t", str(tmp_path / "missing"), "--flux-url", f"{base}/nope.tar.gz", "--flux-digest",
                         digest(good), env=pulumi_env)
    assert missing.code != 0
    assert "status: 404" in missing.output

    # The host in the URL is replaced when SOURCE_CONTROLLER_LOCALHOST is set (running outside the cluster).
    port = base.rsplit(":", 1)[1]
    overridden = await init("-t", str(tmp_path / "override"), "--flux-url",
                            "http://source-controller.flux-system.svc.cluster.local./good.tar.gz",
                            "--flux-digest", digest(good),
                            env={**pulumi_env, "SOURCE_CONTROLLER_LOCALHOST": f"127.0.0.1:{port}"})
    assert overridden.code == 0, overridden.output


@pytest.mark.parametrize(("case", "archive", "message"), [
    ("dotdot", tarball({}, names=["../../escaped.txt"]), "refusing archive entry"),
    ("absolute-symlink", tarball({"Pulumi.yaml": b"x"}, links={"etc": "/etc"}), "refusing archive entry"),
    ("escaping-symlink", tarball({}, links={"up": "../../.."}), "refusing archive entry"),
    ("oversize", tarball({"big.bin": b"\0" * 4096}), "max archive size of 1000 bytes"),
])
async def test_flux_unsafe_archives_are_refused(tmp_path: Path, artifacts: tuple[str, dict[str, bytes]],
                                                pulumi_env: dict[str, str], case: str, archive: bytes,
                                                message: str) -> None:
    base, served = artifacts
    served[f"/{case}.tar.gz"] = archive
    target = tmp_path / "deep" / "target"
    refused = await init("-t", str(target), "--flux-url", f"{base}/{case}.tar.gz", "--flux-digest",
                         digest(archive), env={**pulumi_env, "FLUX_MAX_UNTAR_SIZE_BYTES": "1000"})
    assert refused.code != 0
    assert message in refused.output
    assert not any(target.iterdir())
    assert not (tmp_path / "escaped.txt").exists()
    assert sorted(p.name for p in (tmp_path / "deep").iterdir()) == ["target"]


async def test_project_info(tmp_path: Path) -> None:
    written = await init("-t", str(tmp_path / "ws"), "--project-name", "my-program", "--project-runtime", "yaml")
    assert written.code == 0, written.output
    assert (tmp_path / "ws" / "Pulumi.yaml").read_text() == "name: my-program\nruntime: yaml\n"


async def test_exactly_one_source(tmp_path: Path) -> None:
    both = await init("-t", str(tmp_path), "--git-url", "http://x", "--git-revision", "main", "--flux-url", "http://y",
                      "--flux-digest", "sha256:" + "0" * 64)
    assert both.code != 0
    half = await init("-t", str(tmp_path), "--flux-url", "http://y")
    assert half.code != 0
    assert "missing [flux-digest]" in half.output
