"""Stacks on Flux sources, end to end against the real Flux source-controller (built from its Go module by
`make tools`): a GitRepository on the loopback git server gets an artifact from source-controller, a Stack with
`fluxSource` deploys it with the real Pulumi CLI and YAML host, a new commit reaches the Stack through the lazily
started GitRepository watch, and a missing or artifact-less source stalls the Stack until it appears. A Bucket on
the test bed's real S3 server (gofakes3) and an OCIRepository on its real OCI registry go the same way."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import lightkube
import pytest

from pko.controllers.stack import source as source_mod
from pko.kube import client as kclient
from pko.kube import resources
from pko.sources import flux as flux_source
from pko.testing import controlplane, flux, gitserver, objectstore, ociregistry, operator, waiting

GIT_REPOSITORY = resources.GIT_REPOSITORY
BUCKET = resources.Kind("source.toolkit.fluxcd.io/v1", "Bucket", "buckets")
OCI_REPOSITORY = resources.Kind("source.toolkit.fluxcd.io/v1", "OCIRepository", "ocirepositories")
PASSPHRASE = {"type": "Literal", "literal": {"value": "e2e-passphrase"}}
SOURCE_REF = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository"}


@pytest.fixture(scope="module")
async def source_controller(cluster: controlplane.ControlPlane,
                            tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[flux.SourceController]:
    """The Flux CRDs on the session control plane and source-controller running against it."""
    async with kclient.Client.connect(lightkube.KubeConfig.from_file(str(cluster.kubeconfig))) as client:
        await flux.install_crds(client)
    with flux.running(cluster.kubeconfig, tmp_path_factory.mktemp("source-controller")) as controller:
        yield controller


@pytest.fixture
async def sc(source_controller: flux.SourceController, kc: kclient.Client,
             namespace: str) -> AsyncIterator[flux.SourceController]:
    """source-controller for one test; the test's GitRepositories are deleted (finalizers and all) afterwards,
    as a deleted namespace keeps its objects on a control plane without kube-controller-manager."""
    yield source_controller
    for repo in (await kc.list(GIT_REPOSITORY, namespace)).items:
        await kc.delete(GIT_REPOSITORY, repo["metadata"]["name"], namespace, missing_ok=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if not (await kc.list(GIT_REPOSITORY, namespace)).items:
            break
        await asyncio.sleep(0.5)


def project(greeting: str) -> str:
    return f"name: flux-e2e\nruntime: yaml\noutputs:\n  greeting: {greeting}\n  token:\n    fn::secret: s3cr3t\n"


def repo_files(greeting: str) -> dict[str, str]:
    return {"app/Pulumi.yaml": project(greeting), "README.md": "the program lives in app/\n"}


def git_repository(name: str, namespace: str, url: str, **spec: Any) -> dict[str, Any]:
    return GIT_REPOSITORY.new(name, namespace, spec={"url": url, "interval": "5s", "timeout": "30s",
                                                     "ref": {"branch": "main"}, **spec})


def flux_stack(name: str, namespace: str, source: str, backend: Path) -> dict[str, Any]:
    return resources.STACK.new(name, namespace, spec={
        "stack": "dev", "backend": f"file://{backend}", "envRefs": {"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE},
        "fluxSource": {"sourceRef": {**SOURCE_REF, "name": source}, "dir": "app"},
    })


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def artifact(obj: dict[str, Any]) -> dict[str, Any]:
    return dict((obj.get("status") or {}).get("artifact") or {})


def ready_with(greeting: str, revision: str) -> Callable[[dict[str, Any]], bool]:
    def test(obj: dict[str, Any]) -> bool:
        status = obj.get("status") or {}
        return (condition(obj, "Ready").get("status") == "True"
                and (status.get("outputs") or {}).get("greeting") == greeting
                and (status.get("lastUpdate") or {}).get("lastSuccessfulCommit") == revision)
    return test


def stalled(reason: str, message_start: str) -> Callable[[dict[str, Any]], bool]:
    def test(obj: dict[str, Any]) -> bool:
        found = condition(obj, "Stalled")
        return (found.get("status") == "True" and found.get("reason") == reason
                and str(found.get("message", "")).startswith(message_start))
    return test


def repo_ready(revision: str) -> Callable[[dict[str, Any]], bool]:
    def test(obj: dict[str, Any]) -> bool:
        return condition(obj, "Ready").get("status") == "True" and artifact(obj).get("revision") == revision
    return test


async def wait_for(kc: kclient.Client, kind: resources.Kind, name: str, namespace: str,
                   test: Callable[[dict[str, Any]], bool], sc: flux.SourceController,
                   timeout: float = 180.0) -> dict[str, Any]:
    """`pko.testing.waiting.wait_for`, with source-controller's log in the failure message."""
    return await waiting.wait_for(kc, kind, name, namespace, test, timeout,
                                  diagnostics=lambda: f"--- source-controller ({sc.log_path}):\n{sc.logs()}")


async def wait_unstalled(kc: kclient.Client, name: str, namespace: str, sc: flux.SourceController) -> None:
    """The source's new artifact reaches the Stack through the GitRepository watch: well before the 30s retry of
    an unavailable source would reconcile it again."""
    await wait_for(kc, resources.STACK, name, namespace, lambda o: condition(o, "Stalled") == {}, sc,
                   timeout=source_mod.SOURCE_UNAVAILABLE_RETRY * 2 / 3)


async def test_stack_deploys_a_git_repository_artifact_and_follows_new_commits(
    kc: kclient.Client, namespace: str, sc: flux.SourceController, git: gitserver.GitServer,
    running_operator: operator.Operator, tmp_path: Path,
) -> None:
    repo = f"flux-{uuid.uuid4().hex[:8]}"
    first = git.create_repo(repo, repo_files("hello from Flux"))
    await kc.create(git_repository("app", namespace, git.http_url(repo)))

    # source-controller clones the loopback repository and publishes an artifact on its own server.
    source = await wait_for(kc, GIT_REPOSITORY, "app", namespace, repo_ready(f"main@sha1:{first}"), sc)
    art = artifact(source)
    assert art["url"].startswith(f"http://{sc.storage_address}/gitrepository/{namespace}/app/")
    assert art["digest"].startswith("sha256:")
    # The agent's fetcher takes the artifact as source-controller serves it: digest verified, tarball extracted.
    fetched = tmp_path / "fetched"
    await asyncio.to_thread(flux_source.fetch, art["url"], art["digest"], fetched)
    assert (fetched / "app" / "Pulumi.yaml").read_text() == project("hello from Flux")
    # In a cluster the URL names source-controller's Service; SOURCE_CONTROLLER_LOCALHOST points the agent here.
    in_cluster = art["url"].replace(sc.storage_address, "source-controller.flux-system.svc.cluster.local.")
    overridden = tmp_path / "overridden"
    await asyncio.to_thread(flux_source.fetch, in_cluster, art["digest"], overridden,
                            host_override=sc.storage_address)
    assert (overridden / "app" / "Pulumi.yaml").read_text() == project("hello from Flux")

    backend = tmp_path / "state"
    backend.mkdir()
    await kc.create(flux_stack("app", namespace, "app", backend))
    stack = await wait_for(kc, resources.STACK, "app", namespace,
                           ready_with("hello from Flux", art["revision"]), sc)
    status = stack["status"]
    assert status["outputs"] == {"greeting": "hello from Flux", "token": "[secret]"}
    assert status["lastUpdate"]["lastAttemptedCommit"] == art["revision"]
    assert status["lastUpdate"]["state"] == "succeeded"
    assert status["projectInfo"] == {"name": "flux-e2e", "runtime": "yaml"}
    workspace = await kc.get(resources.WORKSPACE, "app", namespace)
    assert workspace["spec"]["flux"] == {"url": art["url"], "digest": art["digest"], "dir": "app"}
    first_update = status["lastUpdate"]["name"]

    # A new commit: source-controller picks it up on its 5s interval, the Stack's lazy GitRepository watch sees
    # the new artifact revision, and the Stack deploys it.
    second = git.commit(repo, repo_files("hello again"), message="second")
    source = await wait_for(kc, GIT_REPOSITORY, "app", namespace, repo_ready(f"main@sha1:{second}"), sc)
    revision = artifact(source)["revision"]
    stack = await wait_for(kc, resources.STACK, "app", namespace, ready_with("hello again", revision), sc)
    last = stack["status"]["lastUpdate"]
    assert last["lastAttemptedCommit"] == revision
    assert last["name"] != first_update
    update = await kc.get(resources.UPDATE, last["name"], namespace)
    assert update["spec"]["message"] == f'New commit detected: "{revision}"'


async def test_stack_on_a_missing_git_repository_stalls_until_it_appears(
    kc: kclient.Client, namespace: str, sc: flux.SourceController, git: gitserver.GitServer,
    running_operator: operator.Operator, tmp_path: Path,
) -> None:
    backend = tmp_path / "state"
    backend.mkdir()
    await kc.create(flux_stack("late", namespace, "late-source", backend))
    stack = await wait_for(kc, resources.STACK, "late", namespace,
                           stalled("SourceUnavailable", "could not resolve sourceRef"), sc, timeout=60)
    assert condition(stack, "Stalled")["message"] == (
        'could not resolve sourceRef: gitrepositories.source.toolkit.fluxcd.io "late-source" not found')
    assert condition(stack, "Ready")["status"] == "False"
    assert "lastUpdate" not in stack["status"]

    repo = f"flux-{uuid.uuid4().hex[:8]}"
    sha = git.create_repo(repo, repo_files("late but here"))
    await kc.create(git_repository("late-source", namespace, git.http_url(repo)))
    await wait_unstalled(kc, "late", namespace, sc)
    stack = await wait_for(kc, resources.STACK, "late", namespace,
                           ready_with("late but here", f"main@sha1:{sha}"), sc)
    assert condition(stack, "Stalled") == {}


async def test_stack_on_a_git_repository_without_artifact_stalls_until_it_has_one(
    kc: kclient.Client, namespace: str, sc: flux.SourceController, git: gitserver.GitServer,
    running_operator: operator.Operator, tmp_path: Path,
) -> None:
    repo = f"flux-{uuid.uuid4().hex[:8]}"
    sha = git.create_repo(repo, repo_files("now with an artifact"))
    # A suspended GitRepository is never reconciled by source-controller, so it has no artifact.
    await kc.create(git_repository("held", namespace, git.http_url(repo), suspend=True))
    backend = tmp_path / "state"
    backend.mkdir()
    await kc.create(flux_stack("held", namespace, "held", backend))
    stack = await wait_for(kc, resources.STACK, "held", namespace,
                           stalled("SourceUnavailable", "Flux source has no artifact"), sc, timeout=60)
    assert condition(stack, "Stalled")["message"] == "Flux source has no artifact"
    assert artifact(await kc.get(GIT_REPOSITORY, "held", namespace)) == {}

    await kc.patch(GIT_REPOSITORY, "held", {"spec": {"suspend": False}}, namespace)
    await wait_unstalled(kc, "held", namespace, sc)
    stack = await wait_for(kc, resources.STACK, "held", namespace,
                           ready_with("now with an artifact", f"main@sha1:{sha}"), sc)
    assert condition(stack, "Stalled") == {}


async def _deploys_and_follows(kc: kclient.Client, namespace: str, sc: flux.SourceController, tmp_path: Path,
                               name: str, kind: resources.Kind, first: str, url_kind: str, what: str,
                               change: Callable[[], object], changed: Callable[[dict[str, Any]], bool]) -> None:
    """A Stack `name` on source `programs` of `kind` (whose artifact has revision `first` and greets "hello from
    <what>") deploys it from source-controller's server; `change` publishes "hello again from <what>", and once the
    source says `changed`, the Stack deploys the new revision with the reference's message."""
    backend = tmp_path / "state"
    backend.mkdir()
    stack = flux_stack(name, namespace, "programs", backend)
    stack["spec"]["fluxSource"]["sourceRef"] = {**SOURCE_REF, "kind": kind.kind, "name": "programs"}
    await kc.create(stack)
    ready = await wait_for(kc, resources.STACK, name, namespace, ready_with(f"hello from {what}", first), sc)
    assert ready["status"]["outputs"] == {"greeting": f"hello from {what}", "token": "[secret]"}
    workspace = await kc.get(resources.WORKSPACE, name, namespace)
    assert workspace["spec"]["flux"]["url"].startswith(f"http://{sc.storage_address}/{url_kind}/{namespace}/")

    change()
    source = await wait_for(kc, kind, "programs", namespace, changed, sc)
    second = artifact(source)["revision"]
    stack_now = await wait_for(kc, resources.STACK, name, namespace, ready_with(f"hello again from {what}", second), sc)
    update = await kc.get(resources.UPDATE, stack_now["status"]["lastUpdate"]["name"], namespace)
    assert update["spec"]["message"] == f'New commit detected: "{second}"'


async def test_stack_deploys_a_bucket_artifact_from_a_real_s3_server_and_follows_a_new_object(
    kc: kclient.Client, namespace: str, sc: flux.SourceController, running_operator: operator.Operator,
    tmp_path: Path,
) -> None:
    """A Flux Bucket (provider `generic`, as MinIO and Ceph users configure it) on the test bed's real S3 server:
    source-controller lists and downloads the program's objects with its own S3 client, publishes an artifact, and
    the Stack deploys it; a changed object gives a new artifact revision, which the Stack deploys too."""
    with objectstore.running(tmp_path / "s3", bucket="programs") as store:
        store.put("app/Pulumi.yaml", project("hello from a Bucket").encode())
        store.put("README.md", b"the program lives in app/\n")
        await kc.create(resources.SECRET.new("s3-credentials", namespace, stringData={
            "accesskey": objectstore.ACCESS_KEY, "secretkey": objectstore.SECRET_KEY}))
        await kc.create(BUCKET.new("programs", namespace, spec={
            "provider": "generic", "bucketName": "programs", "endpoint": f"{store.host}:{store.port}",
            "insecure": True, "region": objectstore.REGION, "interval": "5s", "timeout": "30s",
            "secretRef": {"name": "s3-credentials"}}))
        try:
            source = await wait_for(kc, BUCKET, "programs", namespace,
                                    lambda o: condition(o, "Ready").get("status") == "True" and bool(artifact(o)), sc)
            first = artifact(source)["revision"]
            assert first.startswith("sha256:")

            def changed(o: dict[str, Any]) -> bool:
                return artifact(o).get("revision") not in (None, first)

            await _deploys_and_follows(
                kc, namespace, sc, tmp_path, "bucket", BUCKET, first, "bucket", "a Bucket",
                lambda: store.put("app/Pulumi.yaml", project("hello again from a Bucket").encode()), changed)
        finally:
            await kc.delete(resources.STACK, "bucket", namespace, missing_ok=True)
            await kc.delete(BUCKET, "programs", namespace, missing_ok=True)


async def test_stack_deploys_an_oci_repository_artifact_from_a_real_registry_and_follows_a_new_push(
    kc: kclient.Client, namespace: str, sc: flux.SourceController, running_operator: operator.Operator,
    tmp_path: Path,
) -> None:
    """A Flux OCIRepository on the test bed's real OCI registry: the program pushed as `flux push artifact` pushes
    it, pulled and extracted by the real source-controller, deployed by a Stack; a new push to the tag is a new
    artifact revision, which the Stack deploys too."""
    with ociregistry.running(tmp_path / "registry") as registry:
        first_digest = registry.push_flux_artifact("programs/app", "latest", repo_files("hello from OCI"))
        await kc.create(OCI_REPOSITORY.new("programs", namespace, spec={
            "url": registry.url("programs/app"), "ref": {"tag": "latest"}, "insecure": True, "interval": "5s",
            "timeout": "30s"}))
        try:
            source = await wait_for(kc, OCI_REPOSITORY, "programs", namespace,
                                    repo_ready(f"latest@{first_digest}"), sc)
            pushed: list[str] = []
            await _deploys_and_follows(
                kc, namespace, sc, tmp_path, "oci", OCI_REPOSITORY, artifact(source)["revision"], "ocirepository",
                "OCI", lambda: pushed.append(registry.push_flux_artifact("programs/app", "latest",
                                                                        repo_files("hello again from OCI"))),
                lambda o: bool(pushed) and repo_ready(f"latest@{pushed[0]}")(o))
        finally:
            await kc.delete(resources.STACK, "oci", namespace, missing_ok=True)
            await kc.delete(OCI_REPOSITORY, "programs", namespace, missing_ok=True)
