"""The dependency cache with the real clients that use it in workspaces: the Pulumi CLI installing a provider
plugin, `npm install` of a TypeScript program and `go mod download` of a Go program, each run twice as two cold
workspaces would (fresh plugin directory, npm cache, module cache). The upstream is the test bed's package mirror;
the second run must fetch nothing from it, and a fleet's simultaneous requests must fetch a file once.

The cache is served by the Program file server, wired as `pko operator` wires it (:func:`wiring.dependency_cache`).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import hashlib
import json
import logging
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yarl
from prometheus_client import CollectorRegistry

from pko.agent import nodemodules
from pko.agent.pulumicmd import CommandResult
from pko.agent.workspace import Workspace
from pko.controllers import settings as settings_mod
from pko.controllers import wiring
from pko.controllers.program import fileserver
from pko.depcache import npmtree, routes
from pko.testing import binaries, mirror, programs

RANDOM_PLUGIN = f"pulumi-resource-random-v{programs.RANDOM_VERSION}-linux-amd64.tar.gz"


@dataclass
class Bed:
    upstream: mirror.Mirror
    server: fileserver.FileServer
    env: dict[str, str]
    registry: CollectorRegistry

    def results(self, part: str) -> dict[str, float]:
        found: dict[str, float] = {}
        for metric in self.registry.collect():
            if metric.name == "pko_dependency_cache_requests":
                for sample in metric.samples:
                    if sample.name.endswith("_total") and sample.labels["part"] == part:
                        found[sample.labels["result"]] = sample.value
        return found


@pytest.fixture
def upstream() -> Iterator[mirror.Mirror]:
    mirror.require_filled(*mirror.PARTS)
    with mirror.running() as server:
        yield server


async def _bed(upstream: mirror.Mirror, tmp_path: Path, index_ttl: float = 300.0,
               size: int = settings_mod.Settings.dependency_cache_size) -> Bed:
    server = fileserver.FileServer(_no_program, listen="127.0.0.1:0", advertised=None, env={},
                                   hostname=lambda: "localhost")
    registry = CollectorRegistry()
    settings = settings_mod.Settings(
        version="test", dependency_cache_dir=tmp_path / "cache", dependency_cache_index_ttl=index_ttl,
        dependency_cache_size=size,
        dependency_cache_upstreams={"plugins": f"{upstream.url}/plugins", "npm": f"{upstream.url}/npm",
                                    "go": f"{upstream.url}/go"})
    env = wiring.dependency_cache(settings, server, registry)
    assert env is not None
    await server.start()
    return Bed(upstream, server, dict(await env()), registry)


@pytest.fixture
async def bed(upstream: mirror.Mirror, tmp_path: Path) -> AsyncIterator[Bed]:
    made = await _bed(upstream, tmp_path)
    try:
        yield made
    finally:
        await made.server.close()


async def _no_program(ref: object) -> None:
    return None


def _tool(name: str) -> str:
    found = shutil.which(name)
    assert found, f"{name} is not on PATH: the dependency cache test runs the real {name}"
    return found


async def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Run a client off the event loop (the cache answers on it meanwhile); its output when it fails."""
    done = await asyncio.to_thread(subprocess.run, argv, cwd=cwd, env={**os.environ, **env}, capture_output=True,
                                   text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def _counts(upstream: mirror.Mirror, part: str) -> collections.Counter[str]:
    return collections.Counter(upstream.fetched(part))


async def test_a_plugin_is_downloaded_from_the_upstream_once_for_every_workspace(bed: Bed, tmp_path: Path) -> None:
    pulumi = str(binaries.require("pulumi"))
    assert bed.env["PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES"].endswith("/cache/plugins")
    for home in ("first", "second"):
        env = {**bed.env, "PULUMI_HOME": str(tmp_path / home), "PULUMI_SKIP_UPDATE_CHECK": "true"}
        await _run([pulumi, "plugin", "install", "resource", "random", programs.RANDOM_VERSION], tmp_path, env)
        installed = tmp_path / home / "plugins" / f"resource-random-v{programs.RANDOM_VERSION}"
        assert (installed / "pulumi-resource-random").is_file(), sorted((tmp_path / home).rglob("*"))[:20]
    assert _counts(bed.upstream, "plugins") == {f"/plugins/{RANDOM_PLUGIN}": 1}
    assert bed.results("plugins") == {"miss": 1.0, "hit": 1.0}


async def test_simultaneous_requests_fetch_once_and_answers_say_how_they_were_served(bed: Bed) -> None:
    url = f"{routes.cache_base(await bed.server.advertised())}/plugins/{RANDOM_PLUGIN}"
    async with aiohttp.ClientSession() as session:
        async def get() -> tuple[int, str, str, int]:
            async with session.get(url) as answer:
                body = await answer.read()
                return answer.status, answer.headers["X-Cache"], answer.headers["X-Content-Sha256"], len(body)
        answers = await asyncio.gather(*(get() for _ in range(6)))
        assert {a[0] for a in answers} == {200}
        assert sorted(a[1] for a in answers) == ["HIT"] * 5 + ["MISS"]
        assert len({a[2] for a in answers}) == 1
        assert answers[0][3] == (bed.upstream.plugins / RANDOM_PLUGIN).stat().st_size
        assert _counts(bed.upstream, "plugins") == {f"/plugins/{RANDOM_PLUGIN}": 1}

        base = routes.cache_base(await bed.server.advertised())
        async with session.get(f"{base}/plugins/pulumi-resource-random-v4.99.0-linux-amd64.tar.gz") as missing:
            assert missing.status == 404
            assert "not found upstream" in await missing.text()
        async with session.post(url) as posted:
            assert posted.status == 405  # nothing can be put into the cache
        async with session.get(yarl.URL(f"{base}/npm/%2e%2e/%2e%2e/etc/passwd", encoded=True)) as escaped:
            assert escaped.status == 400
        async with session.get(f"{base}/pypi/simple/pulumi/") as other:
            assert other.status == 404
        async with session.get(f"http://{await bed.server.advertised()}/programs/ns/none/1") as prog:
            assert prog.status == 404  # the file server's own route still answers beside the cache


async def test_npm_install_of_an_unchanged_lockfile_fetches_nothing_upstream_the_second_time(
        bed: Bed, tmp_path: Path) -> None:
    npm = _tool("npm")
    runs = []
    for name in ("first", "second"):
        project = tmp_path / name
        project.mkdir()
        for file, text in programs.typescript(name).items():
            (project / file).write_text(text)
        env = {**bed.env, "npm_config_cache": str(tmp_path / f"npm-cache-{name}"), "npm_config_audit": "false",
               "npm_config_fund": "false", "npm_config_update_notifier": "false"}
        await _run([npm, "install"], project, env)
        assert (project / "node_modules" / "@pulumi" / "random" / "package.json").is_file()
        runs.append(_counts(bed.upstream, "npm"))
    first, second = runs
    tarballs = [path for path in first if path.endswith(".tgz")]
    assert f"/npm/@pulumi/random/-/random-{programs.RANDOM_VERSION}.tgz" in tarballs, sorted(first)[:10]
    assert second == first  # the second workspace got every packument and tarball from the cache
    assert max(first.values()) == 1  # and the first asked the upstream once for each
    results = bed.results("npm")
    assert results["hit"] >= len(tarballs)
    assert results["miss"] == sum(first.values())


async def test_go_modules_of_an_unchanged_go_sum_are_fetched_once(bed: Bed, tmp_path: Path) -> None:
    go = _tool("go")
    go_sum = (bed.upstream.go / "go.sum").read_text()
    runs = []
    for name in ("first", "second"):
        module = tmp_path / name
        module.mkdir()
        for file, text in programs.go(go_sum, name).items():
            (module / file).write_text(text)
        env = {**bed.env, "GOMODCACHE": str(tmp_path / f"modcache-{name}"), "GOPATH": str(tmp_path / f"gopath-{name}"),
               "GOSUMDB": "off", "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
        await _run([go, "mod", "download"], module, env)
        runs.append(_counts(bed.upstream, "go"))
    first, second = runs
    zips = [path for path in first if path.endswith(".zip")]
    assert f"/go/github.com/pulumi/pulumi-random/sdk/v4/@v/v{programs.RANDOM_VERSION}.zip" in zips
    assert second == first
    assert max(first.values()) == 1
    # fetched module cache directories are read-only: let pytest remove them
    for name in ("first", "second"):
        for path in (tmp_path / f"modcache-{name}").rglob("*"):
            path.chmod(path.stat().st_mode | 0o200)


async def test_an_index_is_served_stale_while_the_upstream_is_down_and_files_stay(
        upstream: mirror.Mirror, tmp_path: Path) -> None:
    made = await _bed(upstream, tmp_path, index_ttl=0.001)  # every index is expired at once
    try:
        base = routes.cache_base(await made.server.advertised())
        async with aiohttp.ClientSession() as session:
            async def get(path: str) -> tuple[int, str]:
                async with session.get(f"{base}{path}") as answer:
                    await answer.read()
                    return answer.status, answer.headers.get("X-Cache", "")
            packument, tarball = "/npm/@pulumi%2frandom", f"/npm/@pulumi/random/-/random-{programs.RANDOM_VERSION}.tgz"
            assert await get(packument) == (200, "MISS")
            assert await get(tarball) == (200, "MISS")
            assert await get(packument) == (200, "MISS")  # expired: asked again
            upstream.stop()
            assert made.server.cache is not None
            await made.server.cache.close()  # its kept-alive connection would still reach the stopped mirror
            assert await get(packument) == (200, "STALE")
            assert await get(tarball) == (200, "HIT")  # a file never expires
            status, _ = await get(f"/plugins/{RANDOM_PLUGIN}")
            assert status == 502  # never fetched, and the upstream is down: a clear failure, not a hang
    finally:
        await made.server.close()


async def _workspace(name: str, tmp_path: Path, bed: Bed, lockfile: str | None,
                     files: dict[str, str] | None = None) -> tuple[Workspace, Path]:
    project = tmp_path / name
    project.mkdir()
    for file, text in (files or programs.typescript(name)).items():
        (project / file).write_text(text)
    if lockfile is not None:
        (project / "package-lock.json").write_text(lockfile)
    env = {**os.environ, **bed.env, "PULUMI_HOME": str(tmp_path / f"home-{name}"), "PULUMI_SKIP_UPDATE_CHECK": "true",
           "npm_config_cache": str(tmp_path / f"npm-cache-{name}"), "npm_config_update_notifier": "false",
           "PATH": f"{binaries.require('pulumi-language-nodejs').parent}{os.pathsep}{os.environ['PATH']}"}
    return await Workspace.open(project, base_env=env, binary=str(binaries.require("pulumi"))), project


async def test_a_lockfile_s_node_modules_tree_is_built_once_and_unpacked_by_every_workspace(
        bed: Bed, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The agent's install with the cache's npm tree: node_modules as npm would install it (modules load, bin links
    run), the plugins still installed by the CLI, the tree built once for two workspaces with the same lockfile
    (their package names differ) and no npm fetch from the upstream for the second; a third, whose plugins folder
    already holds the plugin, runs no plugin install."""
    node = _tool("node")
    lockfile = mirror.npm_lockfile(bed.upstream, programs.typescript("first"))
    assert bed.env["PKO_NPM_TREE_URL"].endswith("/cache/npm-tree")
    fetched = []
    # a process of this test's own: the workspace's CLI commands must leave the caller's children alone (they once
    # swept every child of the process, this suite's control plane included)
    bystander = await asyncio.create_subprocess_exec("sleep", "300")
    alive = Path(f"/proc/{bystander.pid}")
    for name in ("first", "second"):
        lock = lockfile.replace('"name": "first"', f'"name": "{name}"')
        workspace, project = await _workspace(name, tmp_path, bed, lock)
        assert await workspace.install()
        assert alive.exists(), "the install killed a process it did not start"
        assert not (project / "node_modules" / ".pko").exists()
        await _run([node, "-e", "require('@pulumi/pulumi'); require('@pulumi/random'); require('typescript')"],
                   project, {})
        tsc = project / "node_modules" / ".bin" / "tsc"
        assert tsc.is_symlink()
        assert os.readlink(tsc) == "../typescript/bin/tsc"
        assert "Version 5." in await _run([str(tsc), "--version"], project, {})
        plugin = tmp_path / f"home-{name}" / "plugins" / f"resource-random-v{programs.RANDOM_VERSION}"
        assert (plugin / "pulumi-resource-random").is_file()  # `pulumi install --no-dependencies`
        assert not list(project.glob(".pko-node-modules-*"))  # the staging folder is gone
        fetched.append(sum(_counts(bed.upstream, "npm").values()))
    bystander.kill()
    await bystander.wait()
    assert bed.results("npm-tree") == {"miss": 1.0, "hit": 1.0}

    # a workspace whose plugins folder already holds the plugin its packages name (as mounted from an image
    # volume, or kept): the tree, and no plugin install at all
    plugin = f"resource-random-v{programs.RANDOM_VERSION}"
    shutil.copytree(tmp_path / "home-first" / "plugins" / plugin, tmp_path / "home-third" / "plugins" / plugin)
    workspace, project = await _workspace("third", tmp_path, bed, lockfile.replace('"name": "first"',
                                                                                   '"name": "third"'))
    with caplog.at_level(logging.INFO, logger="pko.agent.workspace"):
        assert await workspace.install()
    assert "skipping the plugin install: every plugin the packages name is in" in caplog.text
    assert (project / "node_modules" / "@pulumi" / "random" / "package.json").is_file()
    assert sorted(p.name for p in (tmp_path / "home-third" / "plugins").iterdir()) == [plugin]

    async def slowly() -> AsyncIterator[bytes]:  # a lockfile that arrives in pieces, as over a busy node's network
        data = lockfile.encode()
        for start in range(0, len(data), 4096):
            yield data[start:start + 4096]
            await asyncio.sleep(0.01)
    async with aiohttp.ClientSession() as session, \
            session.post(bed.env["PKO_NPM_TREE_URL"], data=slowly()) as answer:
        assert answer.status == 200, await answer.text()
        assert answer.headers["X-Cache"] == "HIT"
    assert fetched[0] > 200
    assert fetched[1] == fetched[0]


async def test_the_kubernetes_sdk_s_published_install_scripts_are_left_to_the_cli_s_plugin_step(
        bed: Bed, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tree of a program with the Kubernetes SDK holds two packages with install scripts, both the published
    files the agent recognises (the SDK's plugin script, protobufjs's warning): no `npm rebuild` runs, and the plugin
    the SDK's script would have installed is installed by the CLI's plugin step."""
    files = programs.typescript_kubernetes("k8sprog")
    lockfile = await asyncio.to_thread(mirror.npm_lockfile, bed.upstream, files)
    workspace, project = await _workspace("k8sprog", tmp_path, bed, lockfile, files)
    ran: list[tuple[str, ...]] = []
    run = workspace.cli.run

    async def recorded(args: Sequence[str], **options: Any) -> CommandResult:  # still runs it
        ran.append((options.get("program") or "pulumi", *args))
        return await run(args, **options)
    monkeypatch.setattr(workspace.cli, "run", recorded)
    with caplog.at_level(logging.INFO, logger="pko.agent.workspace"):
        assert await workspace.install()
    plugin = f"resource-kubernetes-v{programs.KUBERNETES_VERSION}"
    assert (f"not running the install scripts of @pulumi/kubernetes: its script installs the plugin {plugin}, "
            "which the CLI's plugin step installs") in caplog.text
    assert "not running the install scripts of protobufjs: protobufjs's postinstall only warns" in caplog.text
    assert ran == [("pulumi", "install", "--no-dependencies")]
    assert (tmp_path / "home-k8sprog" / "plugins" / plugin / "pulumi-resource-kubernetes").is_file()
    await _run([_tool("node"), "-e", "require('@pulumi/kubernetes')"], project, {})


async def test_the_tree_is_unpacked_before_the_first_install_asks_for_it(bed: Bed, tmp_path: Path) -> None:
    """What `agent serve` does while it waits for the operator's first Install: the tree is unpacked already when
    the Install comes, which takes it as it is (the cache is not asked again) and installs the plugin beside it."""
    lockfile = mirror.npm_lockfile(bed.upstream, programs.typescript("first"))
    workspace, project = await _workspace("early", tmp_path, bed, lockfile.replace('"name": "first"',
                                                                                   '"name": "early"'))
    workspace.unpack_early()
    assert workspace.early_tree is not None
    assert isinstance(await asyncio.wait_for(workspace.early_tree, 300), nodemodules.Offer)
    assert (project / "node_modules" / "@pulumi" / "random" / "package.json").is_file()  # no install has run
    assert not (tmp_path / "home-early" / "plugins").exists()
    assert bed.results("npm-tree") == {"miss": 1.0}
    assert await workspace.install()
    assert workspace.early_tree is None
    assert bed.results("npm-tree") == {"miss": 1.0}
    plugin = tmp_path / "home-early" / "plugins" / f"resource-random-v{programs.RANDOM_VERSION}"
    assert (plugin / "pulumi-resource-random").is_file()


async def test_a_tree_is_answered_while_it_is_built_and_every_waiting_request_gets_all_of_it(bed: Bed) -> None:
    """The first bytes of a new lockfile's tree reach the pods that asked before the build has finished (nothing is
    stored yet when they arrive), each of three simultaneous requests gets the whole tree, byte for byte the one
    then kept, and a request after the build is answered from the store with its digest."""
    lockfile = mirror.npm_lockfile(bed.upstream, programs.typescript("first")).encode()
    cache = bed.server.cache
    assert cache is not None
    key = f"{routes.NPM_TREE}/{npmtree.plan(lockfile).key}"
    url = bed.env["PKO_NPM_TREE_URL"]
    async with aiohttp.ClientSession() as session:
        async def ask() -> tuple[str, bool, bytes]:
            async with session.post(url, data=lockfile) as answer:
                assert answer.status == 200, await answer.text()
                first = await answer.content.readany()
                stored_then = cache.store.get(key) is not None
                return answer.headers["X-Cache"], stored_then, first + await answer.read()
        answers = await asyncio.gather(*(ask() for _ in range(3)))
        entry = cache.store.get(key)
        assert entry is not None
        kept = cache.store.blob(entry).read_bytes()
        assert sorted(a[0] for a in answers) == ["HIT", "HIT", "MISS"]
        assert [a[1] for a in answers] == [False] * 3, "the tree was not answered until it was built"
        assert all(a[2] == kept for a in answers)
        async with session.post(url, data=lockfile) as answer:
            assert answer.headers["X-Cache"] == "HIT"
            assert answer.headers["X-Content-Sha256"] == hashlib.sha256(await answer.read()).hexdigest()
    assert bed.results("npm-tree") == {"miss": 1.0, "hit": 3.0}


async def test_a_tree_whose_build_fails_after_its_first_bytes_is_cut_off_and_the_workspace_installs_with_npm(
        upstream: mirror.Mirror, tmp_path: Path) -> None:
    """A tree that turns out larger than the cache keeps (a quarter of its size) once its answer has begun: the
    answer ends without its closing chunk, so the agent's unpack fails and it installs with npm as before — never
    a short tree taken for a whole one; and nothing is stored. The refusal is remembered: the next request for the
    same lockfile gets a 422 that says why at once, with no second build. (The limit sits between what the
    packages' tarballs weigh, which is checked before the first byte, and the tree itself.)"""
    lockfile = mirror.npm_lockfile(upstream, programs.typescript("first"))
    measured = await _bed(upstream, tmp_path / "measure")
    try:
        async with aiohttp.ClientSession() as session, \
                session.post(measured.env["PKO_NPM_TREE_URL"], data=lockfile.encode()) as answer:
            tree_size = len(await answer.read())
        assert measured.server.cache is not None
        tarballs = sum(path.stat().st_size for path in (tmp_path / "measure" / "cache" / "blobs").iterdir())
        tarballs -= tree_size
    finally:
        await measured.server.close()
    assert tarballs < tree_size * 0.9, (tarballs, tree_size)
    made = await _bed(upstream, tmp_path / "small", size=4 * (tarballs + tree_size) // 2)
    try:
        workspace, project = await _workspace("first", tmp_path, made, lockfile)
        reason = await nodemodules.install(project, workspace.project(), workspace.cli.env)
        assert isinstance(reason, str)
        assert reason.startswith("the npm tree could not be unpacked: IncompleteRead"), reason
        assert not (project / "node_modules").exists()
        assert not list(project.glob(".pko-node-modules-*"))
        assert made.server.cache is not None
        assert made.server.cache.store.get(f"{routes.NPM_TREE}/{npmtree.plan(lockfile.encode()).key}") is None
        assert made.results("npm-tree") == {"miss": 1.0}
        # the next pod's request is refused at once, with why: the tree is not fetched, checked and written again
        async with aiohttp.ClientSession() as session, \
                session.post(made.env["PKO_NPM_TREE_URL"], data=lockfile.encode()) as answer:
            assert answer.status == 422
            text = await answer.text()
        assert f"the tree is over {made.server.cache.store.max_bytes // 4} bytes" in text
        assert "remembered" in text
        assert made.results("npm-tree") == {"miss": 1.0, "refused": 1.0}
        reason = await nodemodules.install(project, workspace.project(), workspace.cli.env)
        assert isinstance(reason, str)
        assert "answered 422" in reason
    finally:
        await made.server.close()


async def test_a_tree_the_cache_will_not_build_falls_back_to_npm_install(bed: Bed, tmp_path: Path) -> None:
    """A lockfile whose integrity the registry's bytes do not match is refused (422, with the package named) and
    the workspace installs with npm as before; a lockfile behind its package.json is not even sent."""
    lockfile = json.loads(mirror.npm_lockfile(bed.upstream, programs.typescript("first")))
    random_entry = lockfile["packages"]["node_modules/@pulumi/random"]
    random_entry["integrity"] = "sha512-" + base64.b64encode(hashlib.sha512(b"planted").digest()).decode()
    base = routes.cache_base(await bed.server.advertised())
    async with aiohttp.ClientSession() as session, \
            session.post(f"{base}/npm-tree", data=json.dumps(lockfile).encode()) as answer:
        assert answer.status == 422
        assert "@pulumi/random@4.19.1: the registry's tarball does not match" in await answer.text()
    assert bed.results("npm-tree") == {"refused": 1.0}

    workspace, project = await _workspace("first", tmp_path, bed, json.dumps(lockfile))
    reason = await nodemodules.install(project, workspace.project(), workspace.cli.env)
    assert isinstance(reason, str)
    assert "answered 422" in reason
    assert not (project / "node_modules").exists()

    stale = json.loads(mirror.npm_lockfile(bed.upstream, programs.typescript("first")))
    stale["packages"][""]["dependencies"]["@pulumi/random"] = "4.0.0"
    (project / "package-lock.json").write_text(json.dumps(stale))
    reason = await nodemodules.install(project, workspace.project(), workspace.cli.env)
    assert reason == "package-lock.json is not current with package.json"
    assert bed.results("npm-tree") == {"refused": 2.0}  # only the first was asked
