"""Real programs in workspace pods, as users run them: TypeScript, Python and Go programs from Git that use the random
provider, a TypeScript program whose Kubernetes objects are checked with kubectl through update, drift and destroy
(its state in the object store), a Program object that targets one of two random resources, file state on a
dynamically provisioned PersistentVolumeClaim, a provider plugin from an `image` volume (no download), and bad
programs (a package npm cannot find, a TypeScript compile error, a plugin version the mirror lacks) that get a clear
status until a good commit recovers.

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
import base64
import contextlib
import dataclasses
import json
import re
import tempfile
import urllib.parse
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import (
    cluster,
    gitserver,
    mirror,
    nodeconfig,
    objectstore,
    ociregistry,
    pluginimages,
    programs,
    registrygate,
)
from pko.testing.clusterbed import (
    Release,
    diagnose,
    events_of,
    mirror_env,
    new_namespace,
    passphrase_env,
    remove_namespace,
    started_scenarios,
    workspace_template,
)
from pko.testing.waiting import condition, eventually, wait_for, wait_gone

RANDOM_PLUGIN = f"pulumi-resource-random-v{programs.RANDOM_VERSION}-linux-amd64.tar.gz"
KUBERNETES_PLUGIN = f"pulumi-resource-kubernetes-v{programs.KUBERNETES_VERSION}-linux-amd64.tar.gz"
#: The random provider as an OCI image for `image` volumes: the plugin's folder, named as the CLI names it.
RANDOM_IMAGE = pluginimages.PluginImage("random", programs.RANDOM_VERSION)
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
    store: objectstore.ObjectStore


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


def _pull_refused(ref: str) -> Callable[[dict[str, Any]], bool]:
    """Whether a Stack says its workspace pod cannot pull `ref` (the kubelet's ErrImagePull / ImagePullBackOff)."""
    def test(obj: dict[str, Any]) -> bool:
        message = condition(obj, "Reconciling").get("message", "")
        return "ImagePull" in message and ref in message
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


def _live(bed: Bed, kind: str, name: str) -> dict[str, Any] | None:
    """An object as kubectl sees it in the scenario's namespace, or None when it is not there."""
    found = bed.real_cluster.kubectl("get", kind, name, "-n", bed.namespace, "-o", "json", "--ignore-not-found",
                                     "--show-managed-fields").stdout
    return json.loads(found) if found.strip() else None


async def kubernetes(bed: Bed) -> None:
    """The TypeScript program with @pulumi/kubernetes: its ConfigMap and Deployment are made with the workspace
    account's own RBAC, a config change updates the ConfigMap in place, a hand edit is found as drift and undone,
    and deleting the Stack removes both objects: each step checked with kubectl, not only in pko's status."""
    ckc, ns, real_cluster = bed.ckc, bed.namespace, bed.real_cluster
    # the workspace account may edit the namespace's objects, as a user grants it for such a program
    real_cluster.kubectl("create", "rolebinding", "pulumi-edit", "--clusterrole=edit", f"--serviceaccount={ns}:pulumi",
                         "-n", ns)
    config = {"namespace": ns, "app": "app", "image": nodeconfig.PAUSE_IMAGE, "greeting": "hello",
              "kubernetes:enableConfigMapMutable": "true"}  # a data change is an update, not a replacement
    # the state in the object store, as such a Stack keeps it: the destroy on delete must find it whatever pod runs it
    await ckc.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-creds", "namespace": ns},
                      "stringData": bed.store.env()})
    state = {"backend": bed.store.backend_url(f"k8s-{ns}"), "envRefs": {
        **passphrase_env(), **mirror_env(bed.registry),
        **{key: {"type": "Secret", "secret": {"name": "s3-creds", "key": key}} for key in bed.store.env()}}}
    stack = await _git_stack_ready(bed, "k8s", programs.typescript_kubernetes(), timeout=900, config=config, **state)
    outputs = stack["status"]["outputs"]
    assert outputs["configMap"] == "app-settings", outputs
    assert outputs["readyReplicas"] == 1, outputs
    assert stack["status"]["lastUpdate"]["resourceChanges"].get("create") == 4, stack["status"]["lastUpdate"]
    live = _live(bed, "configmap", "app-settings")
    assert live is not None
    assert live["data"] == {"greeting": "hello", "pet": outputs["petName"]}, live
    managers = {f["manager"] for f in live["metadata"]["managedFields"]}
    assert any(m.startswith("pulumi-kubernetes") for m in managers), managers  # applied by the provider
    deployment = _live(bed, "deployment", "app")
    assert deployment is not None
    assert deployment["status"].get("readyReplicas") == 1, deployment
    assert f"/plugins/{KUBERNETES_PLUGIN}" in _fetched(bed.registry, "plugins")
    npm = _fetched(bed.registry, "npm")
    assert f"/npm/@pulumi/kubernetes/-/kubernetes-{programs.KUBERNETES_VERSION}.tgz" in npm, npm[:20]

    # a config change: the ConfigMap is updated in place, and the status and the event say so
    first = stack["status"]["lastUpdate"]["name"]
    await ckc.patch(resources.STACK, "k8s", {"spec": {"config": {**config, "greeting": "hello again"}}}, ns)

    def updated(obj: dict[str, Any]) -> bool:
        last = (obj.get("status") or {}).get("lastUpdate") or {}
        return (condition(obj, "Ready").get("status") == "True" and last.get("name") != first
                and last.get("state") == "succeeded")
    stack = await wait_for(ckc, resources.STACK, "k8s", ns, updated, timeout=600,
                           diagnostics=lambda: diagnose(real_cluster, ns))
    changes = stack["status"]["lastUpdate"]["resourceChanges"]
    assert changes.get("update") == 1, changes
    assert not changes.get("create"), changes
    assert not changes.get("replace"), changes
    assert (_live(bed, "configmap", "app-settings") or {}).get("data", {}).get("greeting") == "hello again"
    events = [e["message"] for e in events_of(real_cluster, ns, "Stack", "k8s") if e["reason"] == "StackCreated"]
    assert any(m == "Successfully updated stack: 0 created, 1 updated, 0 deleted" for m in events), events

    # drift: a hand edit of the ConfigMap. The provider's preview then fails on the field kubectl took (a server-side
    # apply conflict), after the engine said the ConfigMap would be updated: reported as drift, with its URN.
    real_cluster.kubectl("patch", "configmap", "app-settings", "-n", ns, "--type=merge",
                         "-p", '{"data":{"greeting":"edited by hand"}}')
    await ckc.patch(resources.STACK, "k8s", {"spec": {"driftDetection": {"interval": "10s"}}}, ns)
    stack = await wait_for(ckc, resources.STACK, "k8s", ns,
                           lambda o: condition(o, "Drifted").get("reason") == "DriftDetected", timeout=600,
                           diagnostics=lambda: diagnose(real_cluster, ns))
    urn = "urn:pulumi:dev::k8sprog::kubernetes:core/v1:ConfigMap::settings"
    assert condition(stack, "Drifted")["message"].startswith(f"1 resource(s) drifted: {urn} (update)"), stack
    assert 'conflict with "kubectl-patch"' in stack["status"]["drift"]["lastCheck"]["message"]
    detected = [e["message"] for e in events_of(real_cluster, ns, "Stack", "k8s") if e["reason"] == "DriftDetected"]
    assert detected, events_of(real_cluster, ns, "Stack", "k8s")
    # remediation, once the provider may take the field back (the user's choice: PULUMI_K8S_ENABLE_PATCH_FORCE or
    # the resource's pulumi.com/patchForce annotation), restores the declared value
    env = {**state["envRefs"], "PULUMI_K8S_ENABLE_PATCH_FORCE": {"type": "Literal", "literal": {"value": "true"}}}
    await ckc.patch(resources.STACK, "k8s", {"spec": {"envRefs": env,
                                                       "driftDetection": {"interval": "10s", "remediate": True}}}, ns)

    def restored(obj: dict[str, Any]) -> bool:
        live = _live(bed, "configmap", "app-settings") or {}
        return (condition(obj, "Drifted").get("reason") in ("Remediated", "NoDrift")
                and live.get("data", {}).get("greeting") == "hello again")
    await wait_for(ckc, resources.STACK, "k8s", ns, restored, timeout=600, interval=2,
                   diagnostics=lambda: diagnose(real_cluster, ns))

    # deleting the Stack destroys what it made (destroyOnFinalize)
    await ckc.delete(resources.STACK, "k8s", ns)
    await wait_gone(ckc, resources.STACK, "k8s", ns, timeout=600)
    assert _live(bed, "configmap", "app-settings") is None
    assert _live(bed, "deployment", "app") is None


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


async def plugin_image(bed: Bed) -> None:
    """A provider plugin from an `image` volume that the node pulls from a registry, in a namespace that enforces the
    `restricted` profile. First the Stack names a version the registry lacks: its status says why the pod cannot
    start (the kubelet's pull error), with no crash loop. Pointed at the pushed image, by digest, the kubelet pulls
    it from the registry, containerd mounts it read-only, the agent gives its folder a place in the CLI's plugins
    folder (pko.agent.pluginmounts), and the workspace downloads no plugin — its mirror serves none."""
    ckc, ns, real_cluster, pod_mirror = bed.ckc, bed.namespace, bed.real_cluster, bed.registry
    real_cluster.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
    with tempfile.TemporaryDirectory(prefix="pko-test-registry-") as tmp, \
            ociregistry.running(Path(tmp)) as registry:
        real_cluster.trust_registry(registry.address)
        [image] = await asyncio.to_thread(pluginimages.push, registry, [RANDOM_IMAGE])
        real_cluster.remove_images([image.digest])  # as on a node that never ran it: the pod's start pulls it
        missing = dataclasses.replace(image, version="4.99.0", digest="")
        await ckc.create(resources.PROGRAM.new("rand", ns, program=programs.yaml_random_program()))

        async def mounting(name: str, plugin: pluginimages.PluginImage, pull_secret: str | None = None) -> None:
            pod = pluginimages.pod_spec([plugin])
            if pull_secret:
                pod["imagePullSecrets"] = [{"name": pull_secret}]
            await ckc.create(resources.STACK.new(name, ns, spec={
                "stack": "dev", "programRef": {"name": "rand"}, "backend": "file:///tmp",
                "envRefs": {**passphrase_env(), **mirror_env(pod_mirror, "PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES")},
                "workspaceTemplate": workspace_template(podTemplate={"spec": pod}),
            }))
        await mounting("mounted", missing)

        stuck = await wait_for(ckc, resources.STACK, "mounted", ns, _pull_refused(missing.ref), timeout=300,
                               diagnostics=lambda: diagnose(real_cluster, ns))
        assert condition(stuck, "Ready").get("status") == "False", stuck["status"]
        pod = json.loads(real_cluster.kubectl("get", "pod", "mounted-workspace-0", "-n", ns, "-o", "json").stdout)
        assert all(s.get("restartCount", 0) == 0 for s in pod["status"].get("containerStatuses", [])), "no crash loop"
        assert pluginimages.pulled_bytes(registry, [image]) == 0

        await ckc.patch(resources.STACK, "mounted", {"spec": {"workspaceTemplate": workspace_template(
            podTemplate={"spec": pluginimages.pod_spec([image])})}}, ns)

        def done(obj: dict[str, Any]) -> bool:
            return condition(obj, "Ready").get("status") == "True" and bool((obj.get("status") or {}).get("outputs"))

        stack = await wait_for(ckc, resources.STACK, "mounted", ns, done, timeout=600,
                               diagnostics=lambda: diagnose(real_cluster, ns))
        assert 1 <= int(stack["status"]["outputs"]["picked"]) <= 100
        assert stack["status"]["lastUpdate"]["resourceChanges"].get("create") == 3, stack["status"]["lastUpdate"]
        workspace_pod = json.loads(real_cluster.kubectl("get", "pod", "mounted-workspace-0", "-n", ns, "-o",
                                                        "json").stdout)
        assert {"name": "plugin-random", "image": {"reference": image.ref, "pullPolicy": "IfNotPresent"}} in \
            workspace_pod["spec"]["volumes"]
        # the node pulled the image from the registry: its manifest by digest, its layer
        served = registry.served(image.repository)
        assert f"GET manifests/{image.digest}" in served, served
        assert pluginimages.pulled_bytes(registry, [image]) == image.layers[0].size, served

        # the same image from a registry that asks for credentials: refused without the pod's pull secret, pulled
        # with the one the Stack's template names (the kubelet pulls `image` volumes with the pod's imagePullSecrets)
        with registrygate.guarding(registry, "pko", "plugin-reader") as gate:
            real_cluster.trust_registry(gate.address)
            private = dataclasses.replace(image, registry=gate.address)
            config = base64.b64encode(json.dumps(gate.docker_config()).encode()).decode()
            await ckc.create({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
                              "metadata": {"name": "plugin-registry", "namespace": ns},
                              "data": {".dockerconfigjson": config}})
            await mounting("anonymous", private)
            await wait_for(ckc, resources.STACK, "anonymous", ns, _pull_refused(private.ref), timeout=300,
                           diagnostics=lambda: diagnose(real_cluster, ns))
            # only then the Stack with the secret: once its pod has pulled the ref, the node holds it, and a pod
            # asking `IfNotPresent` gets it without credentials (the caveat in docs/programs.md)
            await mounting("private", private, pull_secret="plugin-registry")
            await wait_for(ckc, resources.STACK, "private", ns, done, timeout=600,
                           diagnostics=lambda: diagnose(real_cluster, ns))
            assert gate.refused > 0, "the gate asked for credentials"
            assert gate.passed > 0, "and the private Stack's pod gave them"
    # the update ran the mounted plugin: no plugin was asked of the mirror
    assert _fetched(pod_mirror, "plugins") == [], pod_mirror.requests


async def state_on_a_pvc(bed: Bed) -> None:
    """File state on a PersistentVolumeClaim of the cluster's default StorageClass, as many reference examples keep
    it: the claim binds to a volume the real provisioner makes on the node, the state outlives the workspace pod (the
    next pod's update creates nothing anew), and the volume is removed with the claim."""
    ckc, ns, real_cluster = bed.ckc, bed.namespace, bed.real_cluster
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "state", "namespace": ns},
             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}}
    real_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(claim))
    await ckc.create(resources.PROGRAM.new("kept", ns, program=programs.yaml_random_program()))
    pod = {"volumes": [{"name": "state", "persistentVolumeClaim": {"claimName": "state"}}],
           "containers": [{"name": "pulumi", "volumeMounts": [{"name": "state", "mountPath": "/state"}]}]}
    await ckc.create(resources.STACK.new("kept", ns, spec={
        "stack": "dev", "programRef": {"name": "kept"}, "backend": "file:///state", "destroyOnFinalize": True,
        "envRefs": {**passphrase_env(), **mirror_env(bed.registry, "PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES")},
        "config": {"round": "1"}, "workspaceTemplate": workspace_template(podTemplate={"spec": pod}),
    }))

    def ready_round(n: int) -> Callable[[dict[str, Any]], bool]:
        def test(obj: dict[str, Any]) -> bool:
            last = (obj.get("status") or {}).get("lastUpdate") or {}
            return (condition(obj, "Ready").get("status") == "True" and last.get("state") == "succeeded"
                    and obj["metadata"].get("generation") == (obj.get("status") or {}).get("observedGeneration")
                    and (obj["spec"].get("config") or {}).get("round") == str(n))
        return test
    stack = await wait_for(ckc, resources.STACK, "kept", ns, ready_round(1), timeout=600,
                           diagnostics=lambda: diagnose(real_cluster, ns))
    picked = stack["status"]["outputs"]["picked"]
    assert stack["status"]["lastUpdate"]["resourceChanges"].get("create") == 3, stack["status"]["lastUpdate"]

    # the claim is bound to a volume the provisioner made on the node, and the state is in it
    claim = json.loads(real_cluster.kubectl("get", "pvc", "state", "-n", ns, "-o", "json").stdout)
    assert claim["status"]["phase"] == "Bound"
    assert claim["spec"]["storageClassName"] == nodeconfig.STORAGE_CLASS
    volume = json.loads(real_cluster.kubectl("get", "pv", claim["spec"]["volumeName"], "-o", "json").stdout)
    assert volume["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == nodeconfig.STORAGE_PROVISIONER
    directory = Path((volume["spec"].get("hostPath") or volume["spec"].get("local") or {})["path"])
    assert directory.parent == real_cluster.paths.local_volumes, directory
    assert (directory / ".pulumi" / "stacks" / "kept" / "dev.json").is_file(), sorted(directory.rglob("*"))[:20]

    # a new pod: the next update finds the state the first pod left on the volume
    first_pod = json.loads(real_cluster.kubectl("get", "pod", "kept-workspace-0", "-n", ns, "-o", "json").stdout)
    real_cluster.kubectl("delete", "pod", "kept-workspace-0", "-n", ns, "--wait=false")
    await ckc.patch(resources.STACK, "kept", {"spec": {"config": {"round": "2"}}}, ns)
    stack = await wait_for(ckc, resources.STACK, "kept", ns, ready_round(2), timeout=600,
                           diagnostics=lambda: diagnose(real_cluster, ns))
    second_pod = json.loads(real_cluster.kubectl("get", "pod", "kept-workspace-0", "-n", ns, "-o", "json").stdout)
    assert second_pod["metadata"]["uid"] != first_pod["metadata"]["uid"]
    changes = stack["status"]["lastUpdate"]["resourceChanges"]
    assert not changes.get("create"), changes
    assert changes.get("same") == 3, changes
    assert stack["status"]["outputs"]["picked"] == picked

    # the Stack destroys its resources; the claim's deletion releases the volume, which the provisioner removes
    await ckc.delete(resources.STACK, "kept", ns)
    await wait_gone(ckc, resources.STACK, "kept", ns, timeout=300)
    real_cluster.kubectl("delete", "pvc", "state", "-n", ns, "--wait=false")

    def removed() -> bool:
        found = real_cluster.kubectl("get", "pv", volume["metadata"]["name"], "--ignore-not-found", "-o", "name").stdout
        return not found.strip() and not directory.exists()
    deadline = asyncio.get_running_loop().time() + 180
    while not removed():
        assert asyncio.get_running_loop().time() < deadline, f"the volume is still there: {directory}"
        await asyncio.sleep(1)


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
    """Two Stacks of the TypeScript program with its lockfile, in two namespaces, that name no mirror: the operator
    points their pods at its dependency cache, which fills from the operator's upstream (`bed.registry` here) and
    builds the lockfile's node_modules tree once, which both pods unpack instead of running `npm install`. The
    second cold start fetches no plugin and no npm tarball from the upstream."""
    ckc, upstream = bed.ckc, bed.registry
    files = programs.typescript("cachedprog")
    files["package-lock.json"] = await asyncio.to_thread(mirror.npm_lockfile, upstream, files)
    # what the test itself asked of the upstream: on a fresh mirror, npm resolving the lockfile reads packuments
    resolving = len(_fetched(upstream, "npm"))
    second_ns = await new_namespace(ckc, bed.real_cluster)
    try:
        started = []
        for ns in (bed.namespace, second_ns):
            repo = f"cached-{ns}"
            commit = bed.git.create_repo(repo, files)
            started.append(asyncio.get_running_loop().time())
            # the second keeps its /share on a claim and sleeps when idle (below)
            kept: dict[str, Any] = ({"shareVolume": {"size": "1Gi"}} if ns == second_ns else {})
            await ckc.create(resources.STACK.new("cached", ns, spec={
                "stack": "dev", "projectRepo": bed.git.http_url(repo), "branch": "main", "backend": "file:///tmp",
                "envRefs": passphrase_env(), "destroyOnFinalize": True,
                "workspaceTemplate": workspace_template(resources={"requests": {"cpu": "50m", "memory": "256Mi"}},
                                                        **kept),
                **({"workspaceIdleTimeout": "15s"} if kept else {}),
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
        # both pods unpacked the same tree (npm never resolved a packument), and the CLI installed the plugin
        trees = {ns: re.findall(r"unpacked the dependency cache's npm tree (\w+)", bed.real_cluster.kubectl(
            "logs", "statefulset/cached-workspace", "-c", "pulumi", "-n", ns, check=False).stdout)
            for ns in (bed.namespace, second_ns)}
        assert len(set(map(tuple, trees.values()))) == 1, trees
        assert len(trees[second_ns]) == 1, trees
        assert not [p for p in _fetched(upstream, "npm")[resolving:] if not p.endswith(".tgz")]
        woke = await _woken_with_what_it_installed(bed, second_ns)
        print(f"dependency cache: first cold start {started[0]:.0f}s, second {started[1]:.0f}s; "
              f"{upstream.served('plugins') / 1e6:.1f} MB of plugins and {len(tarballs)} tarballs from the upstream; "
              f"a wake with a kept /share {woke:.0f}s")
    finally:
        await remove_namespace(ckc, bed.real_cluster, second_ns)


async def _woken_with_what_it_installed(bed: Bed, ns: str) -> float:
    """The Stack "cached" of `ns`, whose workspace keeps /share on a claim: asleep, the claim stays; woken by a
    request, the new pod puts back the node_modules the last pod installed instead of unpacking the tree again;
    deleted, the claim goes with it. How long the wake took (request to Ready)."""
    ckc, real_cluster = bed.ckc, bed.real_cluster
    claim_name = "share-cached-workspace-0"
    try:
        await wait_for(ckc, resources.WORKSPACE, "cached", ns,
                       lambda o: condition(o, "Ready").get("reason") == "Sleeping", timeout=180)
        await wait_gone(ckc, resources.POD, "cached-workspace-0", ns, 700)
        claim = json.loads(real_cluster.kubectl("get", "pvc", claim_name, "-n", ns, "-o", "json").stdout)
        assert claim["status"]["phase"] == "Bound", claim["status"]
        asked = asyncio.get_running_loop().time()
        await ckc.patch(resources.STACK, "cached", {"metadata": {"annotations": {
            "pulumi.com/reconciliation-request": "wake"}}}, ns)

        def woken(obj: dict[str, Any]) -> bool:
            last = (obj.get("status") or {}).get("lastUpdate") or {}
            return (condition(obj, "Ready").get("status") == "True" and last.get("reconcileRequest") == "wake"
                    and last.get("state") == "succeeded")
        await wait_for(ckc, resources.STACK, "cached", ns, woken, timeout=400)
        took = asyncio.get_running_loop().time() - asked
        logs = real_cluster.kubectl("logs", "cached-workspace-0", "-c", "pulumi", "-n", ns, check=False).stdout
        assert "put back the node_modules the workspace's last pod installed" in logs, logs[-3000:]
        assert "unpacked the dependency cache's npm tree" not in logs, logs[-3000:]
        # the plugins the last pod installed were kept on the claim too
        assert "the plugins of those packages are on the share: nothing to install" in logs, logs[-3000:]
        # the same claim, not a new one
        again = json.loads(real_cluster.kubectl("get", "pvc", claim_name, "-n", ns, "-o", "json").stdout)
        assert again["metadata"]["uid"] == claim["metadata"]["uid"]
        # deleting the Stack (its destroy wakes the workspace) deletes the workspace's StatefulSet and its claim
        await ckc.delete(resources.STACK, "cached", ns)
        await wait_gone(ckc, resources.STACK, "cached", ns, 400)

        async def claim_gone() -> bool:
            return real_cluster.kubectl("get", "pvc", claim_name, "-n", ns, check=False).returncode != 0
        await eventually(claim_gone, f"the claim {claim_name} deleted with its workspace", timeout=120, interval=1)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{diagnose(real_cluster, ns)}") from None
    return took


SCENARIOS: dict[str, Callable[[Bed], Coroutine[Any, Any, None]]] = {
    "typescript": typescript, "kubernetes": kubernetes, "python": python, "go": go, "targets": targets,
    "state_on_a_pvc": state_on_a_pvc, "bad_input": bad_input,
    "dependency_cache": dependency_cache, "plugin_image": plugin_image,
}
SCENARIO_TESTS = {  # the test that waits for each scenario
    "typescript": "test_typescript_program_installs_from_the_npm_mirror_and_downloads_its_plugin",
    "kubernetes": "test_kubernetes_objects_are_made_updated_healed_of_drift_and_destroyed",
    "python": "test_python_program_builds_its_venv_from_the_pypi_mirror",
    "go": "test_go_program_builds_against_the_module_mirror",
    "targets": "test_program_object_with_targets_creates_only_the_targeted_resource",
    "state_on_a_pvc": "test_file_state_on_a_dynamically_provisioned_pvc_outlives_the_workspace_pod",
    "bad_input": "test_bad_programs_get_a_clear_status_and_the_next_good_commit_recovers",
    "dependency_cache": "test_the_second_cold_start_gets_plugin_and_packages_from_the_operators_cache",
    "plugin_image": "test_a_plugin_from_an_image_volume_is_used_without_a_download",
}


@pytest.fixture(scope="module")
async def started(request: pytest.FixtureRequest, real_cluster: cluster.Cluster, operator_release: Release,
                  pod_git: gitserver.GitServer, cache_upstream: mirror.Mirror, pod_store: objectstore.ObjectStore,
                  ) -> AsyncIterator[dict[str, asyncio.Task[None]]]:
    """Every selected scenario, started at once in a namespace and with a mirror of its own (the dependency cache's
    scenario: the operator's upstream)."""
    mirror.require_filled(*mirror.PARTS)

    def start(name: str, ckc: kclient.Client, namespace: str, stack: contextlib.AsyncExitStack,
              ) -> Coroutine[Any, Any, None]:
        server = (cache_upstream if name == "dependency_cache"
                  else stack.enter_context(mirror.running(host=real_cluster.node_ip)))
        return SCENARIOS[name](Bed(ckc, real_cluster, namespace, pod_git, server, pod_store))
    async with started_scenarios(request, real_cluster, SCENARIO_TESTS, start) as tasks:
        yield tasks


async def test_typescript_program_installs_from_the_npm_mirror_and_downloads_its_plugin(
        started: dict[str, asyncio.Task[None]]) -> None:
    await started["typescript"]


async def test_kubernetes_objects_are_made_updated_healed_of_drift_and_destroyed(
        started: dict[str, asyncio.Task[None]]) -> None:
    await started["kubernetes"]


async def test_python_program_builds_its_venv_from_the_pypi_mirror(started: dict[str, asyncio.Task[None]]) -> None:
    await started["python"]


async def test_go_program_builds_against_the_module_mirror(started: dict[str, asyncio.Task[None]]) -> None:
    await started["go"]


async def test_program_object_with_targets_creates_only_the_targeted_resource(
        started: dict[str, asyncio.Task[None]]) -> None:
    await started["targets"]


async def test_file_state_on_a_dynamically_provisioned_pvc_outlives_the_workspace_pod(
        started: dict[str, asyncio.Task[None]]) -> None:
    await started["state_on_a_pvc"]


async def test_bad_programs_get_a_clear_status_and_the_next_good_commit_recovers(
        started: dict[str, asyncio.Task[None]]) -> None:
    await started["bad_input"]


async def test_the_second_cold_start_gets_plugin_and_packages_from_the_operators_cache(
        started: dict[str, asyncio.Task[None]]) -> None:
    await started["dependency_cache"]


async def test_a_plugin_from_an_image_volume_is_used_without_a_download(started: dict[str, asyncio.Task[None]]) -> None:
    await started["plugin_image"]
