"""Real programs in workspace pods, as users run them: TypeScript, Python and Go programs from Git that use the random
provider, a Program object that targets one of two random resources, and bad programs (a package npm cannot find, a
TypeScript compile error, a plugin version the mirror lacks) that get a clear status until a good commit recovers.

Nothing is baked into the workspace image: each pod downloads the provider plugin from a plugin mirror (through
``PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES``) and its packages from the npm, PyPI and Go module mirrors, over the real
network path from the pod to the node's address (:mod:`pko.testing.mirror`). Each scenario has its own mirror and
namespace and ends with what its mirror served, which is what its pod really fetched. One scenario names no mirror:
its pods get everything through the operator's dependency cache (`pko.depcache`), whose upstream is the mirror.

The scenarios mostly wait on pods, installs and builds, so they all start at once, when the first test of the module
asks (:func:`started`), and each test waits for its own scenario and reports its failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import cluster, gitserver, mirror, programs
from pko.testing.clusterbed import (
    Release,
    diagnose,
    mirror_env,
    new_namespace,
    passphrase_env,
    remove_namespace,
    started_scenarios,
    workspace_template,
)
from pko.testing.waiting import condition, wait_for

RANDOM_PLUGIN = f"pulumi-resource-random-v{programs.RANDOM_VERSION}-linux-amd64.tar.gz"
#: Go's build cache for the Go scenario's pods, on the node (this machine), outside the repository and readable by
#: the pods' uid (not under $HOME): kept between runs like the other caches of the test bed.
GO_BUILD_CACHE = Path("/var/tmp/pko-test-go-build-cache")


@dataclass
class Bed:
    """What one scenario runs against: its own namespace and mirror, the shared cluster and git server."""

    ckc: kclient.Client
    real_cluster: cluster.Cluster
    namespace: str
    git: gitserver.GitServer
    registry: mirror.Mirror


TS_INDEX_BAD_TYPES = """import * as random from "@pulumi/random";
const pet = new random.RandomPet("pet", { length: "three" });
export const petName = pet.id;
"""
MISSING_PLUGIN = """import * as random from "@pulumi/random";
const provider = new random.Provider("old", {}, { version: "4.99.0" });
const pet = new random.RandomPet("pet", {}, { provider });
export const petName = pet.id;
"""


def _ready_at(commit: str) -> Any:
    def test(obj: dict[str, Any]) -> bool:
        status = obj.get("status") or {}
        return (condition(obj, "Ready").get("status") == "True"
                and (status.get("lastUpdate") or {}).get("lastSuccessfulCommit") == commit)
    return test


def _fetched(server: mirror.Mirror, part: str) -> list[str]:
    return [urllib.parse.unquote(p) for p in server.fetched(part)]


async def _git_stack(ckc: kclient.Client, ns: str, name: str, url: str, server: mirror.Mirror,
                     **spec: Any) -> None:
    await ckc.create(resources.STACK.new(name, ns, spec={
        "stack": "dev", "projectRepo": url, "branch": "main", "backend": "file:///tmp",
        "envRefs": {**passphrase_env(), **mirror_env(server)}, "destroyOnFinalize": True,
        "workspaceTemplate": workspace_template(resources={"requests": {"cpu": "50m", "memory": "256Mi"}}),
        **spec,
    }))




async def _git_stack_ready(bed: Bed, name: str, files: dict[str, str], timeout: float = 600,
                           **spec: Any) -> dict[str, Any]:
    """A repository of `files`, a Stack of it pointed at the scenario's mirror, and the Stack once Ready at that
    commit (the namespace's pods, events and logs in the failure)."""
    commit = bed.git.create_repo(f"{name}-{bed.namespace}", files)
    await _git_stack(bed.ckc, bed.namespace, name, bed.git.http_url(f"{name}-{bed.namespace}"), bed.registry, **spec)
    return await wait_for(bed.ckc, resources.STACK, name, bed.namespace, _ready_at(commit), timeout=timeout,
                          diagnostics=lambda: diagnose(bed.real_cluster, bed.namespace))


async def typescript(bed: Bed) -> None:
    pod_mirror = bed.registry
    stack = await _git_stack_ready(bed, "ts", programs.typescript("tsprog"), config={"length": "3"})
    outputs = stack["status"]["outputs"]
    assert outputs["language"] == "typescript"
    assert len(outputs["petName"].split("-")) == 3, outputs  # config `length` reached the program
    assert 1000 <= int(outputs["suffixValue"]) <= 9999, outputs
    assert stack["status"]["lastUpdate"]["resourceChanges"] == {"create": 3}, stack["status"]["lastUpdate"]
    # the pod downloaded the plugin from the mirror, and npm installed the packages from it
    assert f"/plugins/{RANDOM_PLUGIN}" in _fetched(pod_mirror, "plugins")
    npm = _fetched(pod_mirror, "npm")
    assert f"/npm/@pulumi/random/-/random-{programs.RANDOM_VERSION}.tgz" in npm, npm[:20]
    assert f"/npm/@pulumi/pulumi/-/pulumi-{programs.PULUMI_SDK_VERSION}.tgz" in npm, npm[:20]


async def python(bed: Bed) -> None:
    pod_mirror = bed.registry
    # the image's own wheelhouse stays out of it: the index is the mirror
    env = {**mirror_env(pod_mirror), "PIP_NO_INDEX": {"type": "Literal", "literal": {"value": "false"}}}
    stack = await _git_stack_ready(bed, "py", programs.python("pyprog"), envRefs={**passphrase_env(), **env})
    outputs = stack["status"]["outputs"]
    assert outputs["language"] == "python"
    assert 1 <= int(outputs["number"]) <= 1_000_000
    pypi = _fetched(pod_mirror, "pypi")
    assert any(p.startswith(f"/pypi/files/pulumi_random-{programs.RANDOM_VERSION}-") for p in pypi), pypi
    assert f"/plugins/{RANDOM_PLUGIN}" in _fetched(pod_mirror, "plugins")


def _go_build_cache() -> dict[str, Any]:
    """A `workspaceTemplate` whose pod keeps Go's build cache (GOCACHE, compiled packages) in a directory of the node
    that outlives the run: the first run on a machine compiles the Pulumi Go SDK (minutes), later runs reuse it. The
    modules themselves (GOMODCACHE) still come from the mirror every time, which is what the scenario checks."""
    GO_BUILD_CACHE.mkdir(mode=0o777, parents=True, exist_ok=True)
    GO_BUILD_CACHE.chmod(0o777)  # the workspace pods' uid writes it
    pod = {"volumes": [{"name": "gocache", "hostPath": {"path": str(GO_BUILD_CACHE), "type": "Directory"}}],
           "containers": [{"name": "pulumi", "env": [{"name": "GOCACHE", "value": "/gocache"}],
                           "volumeMounts": [{"name": "gocache", "mountPath": "/gocache"}]}]}
    return workspace_template(resources={"requests": {"cpu": "50m", "memory": "256Mi"}}, podTemplate={"spec": pod})


async def go(bed: Bed) -> None:
    pod_mirror = bed.registry
    go_sum = (pod_mirror.go / "go.sum").read_text()  # what the mirror fill resolved for this program
    stack = await _git_stack_ready(bed, "go", programs.go(go_sum, "goprog"), timeout=900, config={"length": "20"},
                                   workspaceTemplate=_go_build_cache())
    outputs = stack["status"]["outputs"]
    assert outputs["language"] == "go"
    # `token` is a secret output of the random provider: masked in status, as every secret is
    assert outputs["token"] == "[secret]" or len(outputs["token"]) == 20, outputs
    go = _fetched(pod_mirror, "go")
    assert f"/go/github.com/pulumi/pulumi-random/sdk/v4/@v/v{programs.RANDOM_VERSION}.zip" in go, go[:20]
    assert f"/plugins/{RANDOM_PLUGIN}" in _fetched(pod_mirror, "plugins")


async def targets(bed: Bed) -> None:
    ckc, ns, real_cluster, pod_mirror = bed.ckc, bed.namespace, bed.real_cluster, bed.registry
    await ckc.create(resources.PROGRAM.new("rand", ns, program=programs.yaml_random_program()))
    await ckc.create(resources.STACK.new("targeted", ns, spec={
        "stack": "dev", "programRef": {"name": "rand"}, "backend": "file:///tmp",
        "envRefs": {**passphrase_env(), **mirror_env(pod_mirror, "PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES")},
        "targets": ["urn:pulumi:dev::rand::random:index/randomInteger:RandomInteger::picked"],
        "workspaceTemplate": workspace_template(),
    }))

    def done(obj: dict[str, Any]) -> bool:
        return condition(obj, "Ready").get("status") == "True" and bool((obj.get("status") or {}).get("outputs"))

    stack = await wait_for(ckc, resources.STACK, "targeted", ns, done, timeout=600,
                           diagnostics=lambda: diagnose(real_cluster, ns))
    # the stack resource and `picked` were created; `skipped` was not (the engine counts it as left alone)
    assert stack["status"]["lastUpdate"]["resourceChanges"].get("create") == 2, stack["status"]["lastUpdate"]
    assert 1 <= int(stack["status"]["outputs"]["picked"]) <= 100


async def bad_input(bed: Bed) -> None:
    ckc, ns, real_cluster, pod_git, pod_mirror = bed.ckc, bed.namespace, bed.real_cluster, bed.git, bed.registry
    repo = f"bad-{ns}"
    files = programs.typescript("badprog", dependencies={"@pko-test/no-such-package": "1.0.0"})
    pod_git.create_repo(repo, files)
    await _git_stack(ckc, ns, "bad", pod_git.http_url(repo), pod_mirror)

    async def not_ready_saying(*needles: str, timeout: float = 420) -> dict[str, Any]:
        def test(obj: dict[str, Any]) -> bool:
            ready = condition(obj, "Ready")
            status = obj.get("status") or {}
            text = " ".join([str((status.get("lastUpdate") or {}).get("message")),
                             *(str(c.get("message")) for c in status.get("conditions") or [])])
            return ready.get("status") == "False" and all(n in text for n in needles)
        return await wait_for(ckc, resources.STACK, "bad", ns, test, timeout=timeout,
                              diagnostics=lambda: diagnose(real_cluster, ns))

    # an npm package the registry does not have: the install fails and the status quotes npm
    await not_ready_saying("@pko-test/no-such-package", "404")
    # the Workspace says which step failed (it retries the install, so the registry may come back)
    await wait_for(ckc, resources.WORKSPACE, "bad", ns,
                   lambda w: condition(w, "Ready").get("reason") == "InstallationFailed"
                   and "@pko-test/no-such-package" in condition(w, "Ready").get("message", ""), timeout=300)

    # a TypeScript compile error: the update fails with the compiler's message
    commit = pod_git.commit(repo, {**programs.typescript("badprog"), "index.ts": TS_INDEX_BAD_TYPES})
    stack = await not_ready_saying("TS2322")
    assert stack["status"]["lastUpdate"]["state"] == "failed"
    assert stack["status"]["lastUpdate"]["lastAttemptedCommit"] == commit

    # a plugin version the mirror lacks: the download's 404 is in the status
    pod_git.commit(repo, {"index.ts": MISSING_PLUGIN})
    await not_ready_saying("4.99.0", "404")
    assert "/plugins/pulumi-resource-random-v4.99.0-linux-amd64.tar.gz" in [
        urllib.parse.unquote(p) for part, p, status in pod_mirror.requests if part == "plugins" and status == 404]

    # the next good commit recovers
    good = pod_git.commit(repo, {"index.ts": programs.TYPESCRIPT_INDEX})
    stack = await wait_for(ckc, resources.STACK, "bad", ns, _ready_at(good), timeout=420,
                           diagnostics=lambda: diagnose(real_cluster, ns))
    assert stack["status"]["outputs"]["language"] == "typescript"


async def dependency_cache(bed: Bed) -> None:
    """Two Stacks of the TypeScript program, in two namespaces, that name no mirror: the operator points their pods
    at its dependency cache, which fills from the operator's upstream (`bed.registry` here). The second cold start
    fetches no plugin and no npm tarball from the upstream."""
    ckc, upstream = bed.ckc, bed.registry
    second_ns = await new_namespace(ckc, bed.real_cluster)
    try:
        started = []
        for ns in (bed.namespace, second_ns):
            repo = f"cached-{ns}"
            commit = bed.git.create_repo(repo, programs.typescript("cachedprog"))
            started.append(asyncio.get_running_loop().time())
            await ckc.create(resources.STACK.new("cached", ns, spec={
                "stack": "dev", "projectRepo": bed.git.http_url(repo), "branch": "main", "backend": "file:///tmp",
                "envRefs": passphrase_env(), "destroyOnFinalize": True,
                "workspaceTemplate": workspace_template(resources={"requests": {"cpu": "50m", "memory": "256Mi"}}),
            }))
            stack = await wait_for(ckc, resources.STACK, "cached", ns, _ready_at(commit), timeout=600,
                                   diagnostics=lambda ns=ns: diagnose(bed.real_cluster, ns))
            assert stack["status"]["outputs"]["language"] == "typescript"
            started[-1] = asyncio.get_running_loop().time() - started[-1]
            if ns == bed.namespace:
                first_plugins, first_npm = _fetched(upstream, "plugins"), _fetched(upstream, "npm")
        # the pods were pointed at the operator's cache, not at the upstream
        sts = await ckc.get(resources.STATEFUL_SET, "cached-workspace", second_ns)
        env = {e["name"]: e.get("value", "") for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["NPM_CONFIG_REGISTRY"].endswith("/cache/npm/"), env
        assert upstream.url not in env["PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES"], env
        # the first cold start filled the cache: one plugin download, each tarball once
        assert first_plugins == [f"/plugins/{RANDOM_PLUGIN}"], first_plugins
        tarballs = [p for p in first_npm if p.endswith(".tgz")]
        assert f"/npm/@pulumi/random/-/random-{programs.RANDOM_VERSION}.tgz" in tarballs
        assert len(tarballs) == len(set(tarballs))
        # the second fetched nothing from the upstream that does not change
        assert _fetched(upstream, "plugins") == first_plugins
        assert [p for p in _fetched(upstream, "npm") if p.endswith(".tgz")] == tarballs
        print(f"dependency cache: first cold start {started[0]:.0f}s, second {started[1]:.0f}s; "
              f"{upstream.served('plugins') / 1e6:.1f} MB of plugins and {len(tarballs)} tarballs from the upstream")
    finally:
        await remove_namespace(ckc, bed.real_cluster, second_ns)


SCENARIOS: dict[str, Callable[[Bed], Coroutine[Any, Any, None]]] = {
    "typescript": typescript, "python": python, "go": go, "targets": targets, "bad_input": bad_input,
    "dependency_cache": dependency_cache,
}
SCENARIO_TESTS = {  # the test that waits for each scenario
    "typescript": "test_typescript_program_installs_from_the_npm_mirror_and_downloads_its_plugin",
    "python": "test_python_program_builds_its_venv_from_the_pypi_mirror",
    "go": "test_go_program_builds_against_the_module_mirror",
    "targets": "test_program_object_with_targets_creates_only_the_targeted_resource",
    "bad_input": "test_bad_programs_get_a_clear_status_and_the_next_good_commit_recovers",
    "dependency_cache": "test_the_second_cold_start_gets_plugin_and_packages_from_the_operators_cache",
}


@pytest.fixture(scope="module")
async def started(request: pytest.FixtureRequest, real_cluster: cluster.Cluster, operator_release: Release,
                  pod_git: gitserver.GitServer, cache_upstream: mirror.Mirror,
                  ) -> AsyncIterator[dict[str, asyncio.Task[None]]]:
    """Every selected scenario, started at once in a namespace and with a mirror of its own (the dependency cache's
    scenario: the operator's upstream)."""
    mirror.require_filled(*mirror.PARTS)

    def start(name: str, ckc: kclient.Client, namespace: str, stack: contextlib.AsyncExitStack,
              ) -> Coroutine[Any, Any, None]:
        server = (cache_upstream if name == "dependency_cache"
                  else stack.enter_context(mirror.running(host=real_cluster.node_ip)))
        return SCENARIOS[name](Bed(ckc, real_cluster, namespace, pod_git, server))
    async with started_scenarios(request, real_cluster, SCENARIO_TESTS, start) as tasks:
        yield tasks


async def test_typescript_program_installs_from_the_npm_mirror_and_downloads_its_plugin(
        started: dict[str, asyncio.Task[None]]) -> None:
    await started["typescript"]


async def test_python_program_builds_its_venv_from_the_pypi_mirror(started: dict[str, asyncio.Task[None]]) -> None:
    await started["python"]


async def test_go_program_builds_against_the_module_mirror(started: dict[str, asyncio.Task[None]]) -> None:
    await started["go"]


async def test_program_object_with_targets_creates_only_the_targeted_resource(
        started: dict[str, asyncio.Task[None]]) -> None:
    await started["targets"]


async def test_bad_programs_get_a_clear_status_and_the_next_good_commit_recovers(
        started: dict[str, asyncio.Task[None]]) -> None:
    await started["bad_input"]


async def test_the_second_cold_start_gets_plugin_and_packages_from_the_operators_cache(
        started: dict[str, asyncio.Task[None]]) -> None:
    await started["dependency_cache"]
