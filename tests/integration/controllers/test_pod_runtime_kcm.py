"""The `pod` workspace runtime against a real API server *and* kube-controller-manager: the operator applies the
StatefulSet and headless Service, the real StatefulSet controller creates the pod (which stays Pending: there is
no kubelet or scheduler), and the real garbage collector removes everything when the Workspace goes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import lightkube
import pytest

from pko.api import names
from pko.controllers.workspace import manifests, pod
from pko.controllers.workspace import runtime as runtime_module
from pko.kube import client as kclient
from pko.kube import errors, objects, owners, resources
from pko.testing import controlplane, operator, waiting

GIT_URL = "https://git.example.com/infra/stacks.git"  # never fetched: the pod does not run
VAP = resources.register(resources.Kind("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy",
                                        "validatingadmissionpolicies", namespaced=False))
VAP_BINDING = resources.register(resources.Kind("admissionregistration.k8s.io/v1",
                                                "ValidatingAdmissionPolicyBinding",
                                                "validatingadmissionpolicybindings", namespaced=False))
BLOCKED = "pods labelled blocked may not run here"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
GC_TIMEOUT = 90.0


@pytest.fixture(scope="module")
async def kcm_cluster(control_plane_with_kcm: controlplane.ControlPlane) -> controlplane.ControlPlane:
    """The control plane with kube-controller-manager, with our CRDs and the operator identity installed."""
    async with kclient.Client.connect(lightkube.KubeConfig.from_file(str(control_plane_with_kcm.kubeconfig))) as c:
        await operator.install_crds(c)
        await operator.install_identity(c)
    return control_plane_with_kcm


@pytest.fixture
async def kcm(kcm_cluster: controlplane.ControlPlane) -> AsyncIterator[kclient.Client]:
    async with kclient.Client.connect(lightkube.KubeConfig.from_file(str(kcm_cluster.kubeconfig))) as client:
        yield client


@pytest.fixture
async def kcm_namespace(kcm: kclient.Client) -> AsyncIterator[str]:
    name = f"pod-{uuid.uuid4().hex[:8]}"
    await kcm.create(resources.NAMESPACE.new(name))
    yield name
    await kcm.delete(resources.NAMESPACE, name, missing_ok=True)


def _ready(obj: dict[str, Any] | None) -> dict[str, Any]:
    found = [c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == "Ready"]
    return found[0] if found else {}


def _by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in items}


RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}


def _workspace(namespace: str) -> dict[str, Any]:
    return resources.WORKSPACE.new("infra", namespace, spec={
        "image": "pulumi/pulumi-python:3.259.0",
        "git": {"url": GIT_URL, "ref": COMMIT, "dir": "stacks/dev"},
        "env": [{"name": "FROM_SPEC", "value": "spec"}],
        "stacks": [{"name": "dev", "create": True}],
        "podTemplate": {
            "metadata": {"labels": {"team": "platform"}, "annotations": {"example.com/owner": "platform-team"}},
            "spec": {
                "nodeSelector": {"pool": "pulumi"},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "pulumi", "effect": "NoSchedule"}],
                "initContainers": [{"name": "extra-setup", "image": "busybox:1.36", "command": ["true"]}],
                "containers": [{
                    "name": "pulumi",
                    "env": [{"name": "FROM_TEMPLATE", "value": "template"}],
                    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
                }],
            },
        },
    })


def _assert_owned_by(obj: dict[str, Any], owner: dict[str, Any]) -> None:
    controller = owners.controller_of(obj)
    assert controller is not None, obj["metadata"]
    assert controller["kind"] == owner["kind"]
    assert controller["name"] == objects.name_of(owner)
    assert controller["uid"] == owner["metadata"]["uid"]
    assert controller.get("blockOwnerDeletion") is True


def _assert_pod_spec(pod: dict[str, Any], namespace: str, agent_image: str) -> None:
    meta = pod["metadata"]
    assert meta["labels"]["auto.pulumi.com/component"] == "workspace"
    assert meta["labels"]["auto.pulumi.com/workspace-name"] == "infra"
    assert meta["labels"]["team"] == "platform"  # podTemplate metadata merged
    assert meta["annotations"]["example.com/owner"] == "platform-team"
    assert len(meta["annotations"]["auto.pulumi.com/revision-hash"]) == 32
    assert "auto.pulumi.com/initialized" not in meta["annotations"]

    spec = pod["spec"]
    assert spec["serviceAccountName"] == "default"
    assert spec["terminationGracePeriodSeconds"] == 600
    assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}, "runAsNonRoot": True,
                                       "runAsUser": 1000, "runAsGroup": 1000}
    assert spec["nodeSelector"] == {"pool": "pulumi"}
    assert {"key": "dedicated", "operator": "Equal", "value": "pulumi", "effect": "NoSchedule"} in spec["tolerations"]
    assert _by_name(spec["volumes"])["share"]["emptyDir"] == {}

    # System init containers first, the template's appended.
    assert [c["name"] for c in spec["initContainers"]] == ["bootstrap", "fetch", "extra-setup"]
    init = _by_name(spec["initContainers"])
    assert init["bootstrap"]["image"] == agent_image
    assert init["fetch"]["image"] == agent_image
    assert init["bootstrap"]["args"] == ["cp", "/agent", "/tini", "/share/"]
    assert init["fetch"]["args"][:2] == ["sh", "-c"]
    assert '/share/agent init -t /share/source --git-url "$GIT_URL" --git-revision "$GIT_REVISION"' \
        in init["fetch"]["args"][2]
    fetch_env = {e["name"]: e.get("value") for e in init["fetch"]["env"]}
    assert fetch_env == {"GIT_URL": GIT_URL, "GIT_REVISION": COMMIT, "GIT_DIR": "stacks/dev",
                         "PULUMI_ENV": "/share/.env"}
    for name in ("bootstrap", "fetch"):
        assert init[name]["securityContext"] == RESTRICTED_CONTAINER, name
        assert {"name": "share", "mountPath": "/share"} in init[name]["volumeMounts"]
    assert init["extra-setup"]["image"] == "busybox:1.36"
    assert init["extra-setup"]["env"] == [{"name": "PULUMI_ENV", "value": "/share/.env"}]

    (pulumi,) = spec["containers"]
    assert pulumi["name"] == "pulumi"
    assert pulumi["image"] == "pulumi/pulumi-python:3.259.0"
    assert pulumi["command"] == [
        "/share/tini", "/share/agent", "--", "serve", "--workspace", "/share/workspace", "--skip-install",
        "--env-file", "/share/.env", "--auth-mode", "kube", "--kube-audience", f"infra.{namespace}",
        "--kube-workspace-namespace", namespace, "--kube-workspace-name", "infra",
    ]
    assert pulumi["workingDir"] == "/share/workspace"
    assert pulumi["ports"] == [{"name": "grpc", "containerPort": 50051, "protocol": "TCP"}]
    assert pulumi["securityContext"] == RESTRICTED_CONTAINER
    assert "readinessProbe" not in pulumi
    assert "livenessProbe" not in pulumi
    # podTemplate resources replace the default requests; env merges by name; PULUMI_ENV comes last.
    assert pulumi["resources"] == {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
    env_names = [e["name"] for e in pulumi["env"]]
    assert set(env_names) == {"FROM_SPEC", "FROM_TEMPLATE", "POD_NAMESPACE", "POD_SA_NAME", "AGENT_MEMLIMIT",
                              "PULUMI_ENV"}
    assert env_names[-1] == "PULUMI_ENV"
    env = _by_name(pulumi["env"])
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["AGENT_MEMLIMIT"]["valueFrom"]["resourceFieldRef"]["resource"] == "requests.memory"


async def test_pod_runtime_statefulset_pod_and_garbage_collection(
    kcm: kclient.Client, kcm_namespace: str, kcm_cluster: controlplane.ControlPlane, tmp_path: Path,
) -> None:
    ns = kcm_namespace
    sts_name = svc_name = "infra-workspace"
    pod_name = "infra-workspace-0"

    # a StatefulSet of the user's own, which the operator has no reason to cache or watch
    users = {"app": "db"}
    await kcm.create(resources.STATEFUL_SET.new("db", ns, spec={
        "selector": {"matchLabels": users}, "serviceName": "db", "replicas": 0,
        "template": {"metadata": {"labels": users}, "spec": {"containers": [{"name": "db", "image": "db:1"}]}}}))

    async with operator.running(kcm_cluster.kubeconfig, tmp_path / "unused", runtime="pod", workers=2,
                                namespace=ns) as op:
        assert op.controllers.local_runtime is None
        ws = await kcm.create(_workspace(ns))

        sts = await waiting.wait_for(kcm, resources.STATEFUL_SET, sts_name, ns, lambda o: True, timeout=60)
        svc = await waiting.wait_for(kcm, resources.SERVICE, svc_name, ns, lambda o: True, timeout=60)
        assert sts is not None
        assert svc is not None
        _assert_owned_by(sts, ws)
        _assert_owned_by(svc, ws)
        assert svc["spec"]["clusterIP"] == "None"
        assert svc["spec"]["selector"] == {"auto.pulumi.com/component": "workspace",
                                           "auto.pulumi.com/workspace-name": "infra"}
        assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == [("grpc", 50051)]
        assert sts["spec"]["serviceName"] == svc_name
        assert sts["spec"]["replicas"] == 1
        cached = op.manager.informers[resources.STATEFUL_SET].store
        await waiting.eventually(lambda: cached.get(objects.ObjectKey(ns, sts_name)) is not None,
                                 "the workspace StatefulSet in the cache", timeout=30)
        assert cached.get(objects.ObjectKey(ns, "db")) is None, "the operator caches the user's StatefulSet"
        assert sts["spec"]["podManagementPolicy"] == "Parallel"

        # The real StatefulSet controller creates the pod from our template.
        pod = await waiting.wait_for(kcm, resources.POD, pod_name, ns, lambda o: True, timeout=60)
        assert pod is not None
        _assert_owned_by(pod, sts)
        settings = op.settings
        agent = manifests.AgentImage.from_settings(settings.agent_image, settings.agent_image_pull_policy,
                                                   settings.version)
        _assert_pod_spec(pod, ns, agent.image)

        # The StatefulSet controller has seen the rollout; with no kubelet the pod never becomes available.
        sts = await waiting.wait_for(kcm, resources.STATEFUL_SET, sts_name, ns, lambda o: bool(
            o and (o.get("status") or {}).get("observedGeneration") == o["metadata"]["generation"]
            and o["status"].get("currentRevision")
            and o["status"].get("currentRevision") == o["status"].get("updateRevision")), timeout=60)
        assert sts is not None
        assert (sts["status"].get("availableReplicas") or 0) == 0
        assert pod["metadata"]["labels"]["controller-revision-hash"] == sts["status"]["currentRevision"]
        # The first reconcile saw a StatefulSet not yet observed by its controller (RollingUpdate); unlike the
        # reference, the rollout's progress re-triggers the Workspace, so its reason moves on by itself.
        ready = _ready(await waiting.wait_for(kcm, resources.WORKSPACE, "infra", ns,
                                              lambda o: _ready(o).get("reason") == "WaitingForReplicas", timeout=60))
        assert ready["status"] == "False"

    # An operator (re)starting finds the StatefulSet rolled out but without an available replica.
    async with operator.running(kcm_cluster.kubeconfig, tmp_path / "unused", runtime="pod", workers=2,
                                namespace=ns) as op:
        workspace = await waiting.wait_for(kcm, resources.WORKSPACE, "infra", ns,
                                           lambda o: _ready(o).get("reason") == "WaitingForReplicas", timeout=60)
        assert workspace is not None
        ready = _ready(workspace)
        assert ready["status"] == "False"
        assert ready["message"] == "Waiting for the workspace pod to be available"
        assert ready["observedGeneration"] == workspace["metadata"]["generation"]
        assert workspace["status"]["observedGeneration"] == workspace["metadata"]["generation"]
        assert not workspace["status"].get("address")
        assert "pulumiVersion" not in workspace["status"]

        pod = await kcm.get(resources.POD, pod_name, ns)
        assert pod["status"]["phase"] == "Pending"
        assert not pod["spec"].get("nodeName")
        assert "auto.pulumi.com/initialized" not in pod["metadata"]["annotations"]

        # Deleting the Workspace: kube-controller-manager's garbage collector removes what it owned.
        await kcm.delete(resources.WORKSPACE, "infra", ns)
        await waiting.wait_gone(kcm, resources.WORKSPACE, "infra", ns, timeout=60)
        for kind, name in ((resources.STATEFUL_SET, sts_name), (resources.SERVICE, svc_name),
                           (resources.POD, pod_name)):
            await waiting.wait_gone(kcm, kind, name, ns, timeout=GC_TIMEOUT)
        # ...and the operator does not bring them back: its caches saw the Workspace and the StatefulSet go (the
        # events that would have queued a reconcile) and its Workspace controller has nothing left to do.
        for kind, name in ((resources.WORKSPACE, "infra"), (resources.STATEFUL_SET, sts_name)):
            cache, key = op.manager.informers[kind].store, objects.ObjectKey(ns, name)
            await waiting.eventually(lambda cache=cache, key=key: cache.get(key) is None,
                                     f"the operator's cache to drop {kind.kind} {name}")
        await waiting.eventually(lambda: waiting.idle(op.manager.registry, names.WORKSPACE_CONTROLLER),
                                 "the Workspace controller to go idle")
        assert await kcm.get_or_none(resources.STATEFUL_SET, sts_name, ns) is None
        assert await kcm.get_or_none(resources.SERVICE, svc_name, ns) is None


async def test_config_values_keep_the_statefulset_and_a_starting_workspace_never_sleeps(
    kcm: kclient.Client, kcm_namespace: str, kcm_cluster: controlplane.ControlPlane, tmp_path: Path,
) -> None:
    """pko (docs/config-without-restart.md): a change of `stacks[].config` values leaves the StatefulSet, its
    generation, its revision and its pod alone (the real StatefulSet controller would replace the pod on any
    template change); an env change still makes a new revision. An idle timeout never scales down a workspace
    that is not ready yet (docs/scale-to-zero.md)."""
    ns = kcm_namespace

    def observed(o: dict[str, Any] | None) -> bool:
        return bool(o and (o.get("status") or {}).get("observedGeneration") == o["metadata"]["generation"]
                    and o["status"].get("currentRevision")
                    and o["status"].get("currentRevision") == o["status"].get("updateRevision"))

    async with operator.running(kcm_cluster.kubeconfig, tmp_path / "unused", runtime="pod", workers=2,
                                namespace=ns):
        body = _workspace(ns)
        body["spec"]["stacks"] = [{"name": "dev", "create": True, "config": [{"key": "greeting", "value": "one"}]}]
        body["spec"]["idleTimeout"] = "1s"
        await kcm.create(body)
        sts = await waiting.wait_for(kcm, resources.STATEFUL_SET, "infra-workspace", ns, observed, timeout=60)
        pod = await waiting.wait_for(kcm, resources.POD, "infra-workspace-0", ns, lambda o: True, timeout=60)
        ws = await waiting.wait_for(kcm, resources.WORKSPACE, "infra", ns, lambda o: bool(
            (o.get("status") or {}).get("observedGeneration") == o["metadata"]["generation"]
            and (o["status"].get("applied") or {}).get("podGeneration")), timeout=60)
        placed_at = ws["status"]["applied"]["podGeneration"]

        await kcm.patch(resources.WORKSPACE, "infra", {"spec": {"stacks": [
            {"name": "dev", "create": True, "config": [{"key": "greeting", "value": "two", "secret": True}]}]}}, ns)
        ws = await waiting.wait_for(kcm, resources.WORKSPACE, "infra", ns, lambda o: (
            (o.get("status") or {}).get("observedGeneration") == o["metadata"]["generation"] > placed_at), timeout=60)
        assert ws["status"]["applied"]["podGeneration"] == placed_at
        again = await kcm.get(resources.STATEFUL_SET, "infra-workspace", ns)
        assert (again["metadata"]["generation"], again["status"]["updateRevision"]) == (
            sts["metadata"]["generation"], sts["status"]["updateRevision"])
        assert again["spec"]["template"] == sts["spec"]["template"]
        assert (await kcm.get(resources.POD, "infra-workspace-0", ns))["metadata"]["uid"] == pod["metadata"]["uid"]
        # not ready (no kubelet): the idle timeout of 1s has long passed, and it is still one replica
        assert again["spec"]["replicas"] == 1
        assert _ready(ws)["reason"] == "WaitingForReplicas"

        await kcm.patch(resources.WORKSPACE, "infra", {"spec": {"env": [{"name": "FROM_SPEC", "value": "changed"}]}},
                        ns)
        # (without a kubelet the new revision never becomes current: only the update revision moves)
        rolled = await waiting.wait_for(kcm, resources.STATEFUL_SET, "infra-workspace", ns, lambda o: bool(
            (o.get("status") or {}).get("observedGeneration") == o["metadata"]["generation"]
            and o["status"].get("updateRevision") not in (None, sts["status"]["updateRevision"])), timeout=60)
        assert rolled["metadata"]["generation"] == sts["metadata"]["generation"] + 1
        ws = await kcm.get(resources.WORKSPACE, "infra", ns)
        assert ws["status"]["applied"]["podGeneration"] == ws["metadata"]["generation"]


async def test_a_statefulset_the_api_server_refuses_stalls_the_workspace_with_its_words_until_the_spec_changes(
    kcm: kclient.Client, kcm_namespace: str, kcm_cluster: controlplane.ControlPlane, tmp_path: Path,
) -> None:
    """A pod template the API server refuses (here a mount of a volume the pod does not have, a typo the
    Workspace's schema cannot see) leaves nothing to migrate: the Workspace is Stalled `StatefulSetInvalid` with the
    API server's message and one Warning event, instead of deleting and applying the StatefulSet every 5 s (the
    reference's Migrated loop); with the template corrected, the StatefulSet is created and Stalled goes."""
    ns = kcm_namespace
    workspace = _workspace(ns)
    pulumi = workspace["spec"]["podTemplate"]["spec"]["containers"][0]
    pulumi["volumeMounts"] = [{"name": "cache-typo", "mountPath": "/cache"}]
    async with operator.running(kcm_cluster.kubeconfig, tmp_path / "unused", runtime="pod", workers=2,
                                namespace=ns):
        await kcm.create(workspace)
        found = await waiting.wait_for(kcm, resources.WORKSPACE, "infra", ns,
                                       lambda o: waiting.condition(o, "Stalled").get("status") == "True", timeout=60)
        stalled, ready = waiting.condition(found, "Stalled"), waiting.condition(found, "Ready")
        assert stalled["reason"] == ready["reason"] == "StatefulSetInvalid"
        assert ready["status"] == "False"
        assert stalled["message"].startswith("the API server refuses the workspace's StatefulSet: ")
        assert "volumeMounts[" in stalled["message"], stalled
        assert 'Not found: "cache-typo"' in stalled["message"], stalled
        await asyncio.sleep(2 * pod.RETRY_AFTER)  # what the reference's loop would have filled with Migrated events
        said = [(e["reason"], e.get("count", 1)) for e in (await kcm.list(resources.EVENT, ns)).items
                if e["involvedObject"]["name"] == "infra"]
        assert said == [("StatefulSetInvalid", 1)], said
        assert await kcm.get_or_none(resources.STATEFUL_SET, "infra-workspace", ns) is None

        pulumi["volumeMounts"] = None
        await kcm.patch(resources.WORKSPACE, "infra", {"spec": {"podTemplate": {"spec": {"containers": [pulumi]}}}},
                        ns)
        await waiting.wait_for(kcm, resources.STATEFUL_SET, "infra-workspace", ns, lambda o: True, timeout=60)
        found = await waiting.wait_for(kcm, resources.WORKSPACE, "infra", ns,
                                       lambda o: _ready(o).get("reason") == "WaitingForReplicas", timeout=60)
        assert waiting.condition(found, "Stalled") == {}


async def test_image_volumes_an_api_server_does_not_serve_are_named_not_lost_in_silence(
    kcm: kclient.Client, kcm_namespace: str, kcm_cluster: controlplane.ControlPlane, tmp_path: Path,
) -> None:
    """This control plane runs without the `ImageVolume` gate (Kubernetes 1.34's default): the API server leaves
    `image` volumes and their mounts out of the StatefulSet without a word. The Workspace names them in one warning
    event, and its Ready message names the agent's (`--workspace-agent-image-volume`: the pod cannot start without
    it) while the pod waits; a plugin's is only a lost shortcut."""
    ns = kcm_namespace
    workspace = _workspace(ns)
    template = workspace["spec"]["podTemplate"]["spec"]
    template["volumes"] = [{"name": "plugin-random", "image": {"reference": "registry.example/plugins/random:4.19.1"}}]
    template["containers"][0]["volumeMounts"] = [{"name": "plugin-random", "mountPath": "/pulumi-plugins/random",
                                                  "readOnly": True}]
    gate = "this cluster does not serve image volumes (Kubernetes 1.35, or 1.31-1.34 with the ImageVolume feature gate)"
    async with operator.running(kcm_cluster.kubeconfig, tmp_path / "unused", runtime="pod", workers=2,
                                namespace=ns, agent_image_volume=True):
        await kcm.create(workspace)
        await waiting.wait_for(kcm, resources.WORKSPACE, "infra", ns, lambda o: _ready(o).get("message") == (
            f"Waiting for the workspace pod to be available: the API server dropped the image volume pko-agent: "
            f"{gate}"), timeout=60)
        await asyncio.sleep(2 * pod.POD_CHECK_AFTER)  # looks again, unchanged: not told again
    sts = await kcm.get(resources.STATEFUL_SET, "infra-workspace", ns)
    assert [v["name"] for v in sts["spec"]["template"]["spec"]["volumes"]] == ["share"]  # what the server kept
    warned = [(e["message"], e.get("count", 1)) for e in (await kcm.list(resources.EVENT, ns)).items
              if e["reason"] == "ImageVolumesDropped"]
    assert warned == [(f"the API server dropped the image volumes pko-agent, plugin-random: {gate}", 1)], warned


async def _block_labelled_pods(kcm: kclient.Client, ns: str) -> str:
    """An admission policy of the platform's (a ValidatingAdmissionPolicy, the API server's own, denying with its
    default reason Invalid) that refuses StatefulSets in `ns` whose pods carry the label `blocked`; returns once the
    API server enforces it. The binding's name, to lift it by deleting the binding."""
    name = f"no-blocked-{ns}"
    await kcm.create(VAP.new(name, spec={
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                                "operations": ["CREATE", "UPDATE"], "resources": ["statefulsets"]}]},
        "validations": [{"expression": "!has(object.spec.template.metadata.labels) || "
                                       "!('blocked' in object.spec.template.metadata.labels)",
                         "message": BLOCKED}],
    }))
    await kcm.create(VAP_BINDING.new(name, spec={
        "policyName": name, "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}},
    }))
    probe = resources.STATEFUL_SET.new("probe", ns, spec={
        "selector": {"matchLabels": {"app": "probe"}}, "serviceName": "probe", "replicas": 0,
        "template": {"metadata": {"labels": {"app": "probe", "blocked": "yes"}},
                     "spec": {"containers": [{"name": "c", "image": "pause"}]}}})
    for _ in range(100):  # the policy takes effect once the API server has compiled it
        try:
            await kcm.create(probe)
        except errors.Invalid:
            return name
        await kcm.delete(resources.STATEFUL_SET, "probe", ns)
        await asyncio.sleep(0.3)
    raise AssertionError("the admission policy never took effect")


async def _lift(kcm: kclient.Client, binding: str) -> None:
    await kcm.delete(VAP_BINDING, binding)
    await kcm.delete(VAP, binding)


def _events(items: list[dict[str, Any]], name: str = "infra") -> list[str]:
    return [e["reason"] for e in items if e["involvedObject"]["name"] == name]


async def test_a_policy_that_refuses_a_running_workspace_s_new_template_stalls_it_and_keeps_what_runs(
    kcm: kclient.Client, kcm_namespace: str, kcm_cluster: controlplane.ControlPlane, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An admission policy refuses a Workspace's new pod template. The reference takes any Invalid refusal for a
    migration: it deletes the StatefulSet — killing the pod, which may be running an update — and applies it
    again every 5 s, for ever. pko deletes only for a field a StatefulSet cannot change in place: here the
    StatefulSet stays as it was, the Workspace is Stalled `StatefulSetInvalid` with the policy's words and one
    warning, and once the policy is lifted the next try (every few minutes; seconds here) applies the template."""
    monkeypatch.setattr(pod, "REFUSED_RETRY_AFTER", 3.0)
    ns = kcm_namespace
    binding = await _block_labelled_pods(kcm, ns)
    async with operator.running(kcm_cluster.kubeconfig, tmp_path / "unused", runtime="pod", workers=2,
                                namespace=ns):
        await kcm.create(_workspace(ns))
        before = await waiting.wait_for(kcm, resources.STATEFUL_SET, "infra-workspace", ns, lambda o: True,
                                        timeout=60)
        await kcm.patch(resources.WORKSPACE, "infra",
                        {"spec": {"podTemplate": {"metadata": {"labels": {"blocked": "yes"}}}}}, ns)
        found = await waiting.wait_for(kcm, resources.WORKSPACE, "infra", ns,
                                       lambda o: waiting.condition(o, "Stalled").get("status") == "True", timeout=60)
        stalled = waiting.condition(found, "Stalled")
        assert stalled["reason"] == waiting.condition(found, "Ready")["reason"] == "StatefulSetInvalid"
        assert stalled["message"].startswith("the API server refuses the workspace's StatefulSet: ")
        assert BLOCKED in stalled["message"], stalled
        await asyncio.sleep(3 * pod.RETRY_AFTER)  # tried again meanwhile: refused each time, told once
        kept = await kcm.get(resources.STATEFUL_SET, "infra-workspace", ns)
        assert kept["metadata"]["uid"] == before["metadata"]["uid"]  # never deleted
        assert "blocked" not in kept["spec"]["template"]["metadata"]["labels"]
        said = _events((await kcm.list(resources.EVENT, ns)).items)
        assert said.count("StatefulSetInvalid") == 1, said
        assert "Migrated" not in said, said

        await _lift(kcm, binding)
        await waiting.wait_for(kcm, resources.STATEFUL_SET, "infra-workspace", ns, lambda o: (
            o["spec"]["template"]["metadata"]["labels"].get("blocked") == "yes"), timeout=60)
        found = await waiting.wait_for(kcm, resources.WORKSPACE, "infra", ns,
                                       lambda o: waiting.condition(o, "Stalled") == {}, timeout=30)
        assert _ready(found)["reason"] in ("RollingUpdate", "WaitingForReplicas"), found["status"]
        assert (await kcm.get(resources.STATEFUL_SET, "infra-workspace", ns))["metadata"]["uid"] == (
            before["metadata"]["uid"])


async def test_a_change_a_statefulset_cannot_take_in_place_still_migrates_it(
    kcm: kclient.Client, kcm_namespace: str, kcm_cluster: controlplane.ControlPlane, tmp_path: Path,
) -> None:
    """The reference's migration stays for what it is for: a Workspace that gains a `shareVolume` needs a
    `volumeClaimTemplates` the StatefulSet cannot take in place, so it is deleted and created again (`Migrated`)."""
    ns = kcm_namespace
    async with operator.running(kcm_cluster.kubeconfig, tmp_path / "unused", runtime="pod", workers=2,
                                namespace=ns):
        await kcm.create(_workspace(ns))
        before = await waiting.wait_for(kcm, resources.STATEFUL_SET, "infra-workspace", ns, lambda o: True,
                                        timeout=60)
        await kcm.patch(resources.WORKSPACE, "infra", {"spec": {"shareVolume": {"size": "1Gi"}}}, ns)
        # Ready says so while the StatefulSet is gone (5 s, polled every 0.2 s), not a reason of before
        await waiting.wait_for(kcm, resources.WORKSPACE, "infra", ns, lambda o: _ready(o).get("message") == (
            pod.MIGRATING), timeout=30, interval=0.2)
        after = await waiting.wait_for(kcm, resources.STATEFUL_SET, "infra-workspace", ns, lambda o: (
            o["metadata"]["uid"] != before["metadata"]["uid"]), timeout=60)
        assert [c["metadata"]["name"] for c in after["spec"]["volumeClaimTemplates"]] == ["share"]
        said = _events((await kcm.list(resources.EVENT, ns)).items)
        assert "Migrated" in said, said
        assert "StatefulSetInvalid" not in said, said
        found = await kcm.get(resources.WORKSPACE, "infra", ns)
        assert waiting.condition(found, "Stalled") == {}


async def test_a_refused_workspace_that_gave_its_slot_away_is_tried_again_once_the_policy_is_lifted(
    kcm: kclient.Client, kcm_namespace: str, kcm_cluster: controlplane.ControlPlane, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a pool of one, a Workspace whose StatefulSet a policy refuses is Stalled and gives its slot to a
    waiting one. Out of the pool, it still tries again every few minutes (seconds here): once the policy is lifted
    and the slot is free, its StatefulSet is made, with no change of its spec."""
    monkeypatch.setattr(pod, "REFUSED_RETRY_AFTER", 3.0)
    monkeypatch.setattr(runtime_module, "REFUSED_RETRY_AFTER", 3.0)
    ns = kcm_namespace
    binding = await _block_labelled_pods(kcm, ns)
    refused = _workspace(ns)
    refused["spec"]["podTemplate"]["metadata"]["labels"]["blocked"] = "yes"
    async with operator.running(kcm_cluster.kubeconfig, tmp_path / "unused", runtime="pod", workers=2,
                                namespace=ns, max_active_workspaces=1):
        await kcm.create(refused)
        await waiting.wait_for(kcm, resources.WORKSPACE, "infra", ns,
                               lambda o: waiting.condition(o, "Stalled").get("reason") == "StatefulSetInvalid",
                               timeout=60)
        other = _workspace(ns)
        other["metadata"]["name"] = "other"
        await kcm.create(other)
        await waiting.wait_for(kcm, resources.STATEFUL_SET, "other-workspace", ns, lambda o: True, timeout=60)
        await _lift(kcm, binding)
        await kcm.delete(resources.WORKSPACE, "other", ns)  # its slot comes free
        await waiting.wait_for(kcm, resources.STATEFUL_SET, "infra-workspace", ns, lambda o: True, timeout=60)
        found = await waiting.wait_for(kcm, resources.WORKSPACE, "infra", ns,
                                       lambda o: waiting.condition(o, "Stalled") == {}, timeout=30)
        assert _ready(found)["reason"] in ("RollingUpdate", "WaitingForReplicas"), found["status"]
