"""Scenarios that run the same way under either operator (pko's or the Go reference) in the real cluster, and the
shape of what each one showed: the interop tier pairs each operator with the other's agent, runs these, and
compares what a user sees (Stack and Update status, events, output Secrets, metrics).

Why shapes and not values: names, timestamps, permalinks and update ids differ between any two runs; what must be
the same is which fields exist, the condition types, statuses and reasons, the event reasons, the outputs.
"""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import cluster, gitserver
from pko.testing.clusterbed import (
    CA_CONFIGMAP,
    CA_DIR,
    CA_ENV,
    OPERATOR_NAMESPACE,
    RELEASE,
    ROOT,
    WORKSPACE_IMAGE,
    WORKSPACE_SERVICE_ACCOUNT,
    Release,
    ca_configmap,
    diagnose,
    helm,
    passphrase_env,
    trusted_ca_values,
)
from pko.testing.clusterbed import PASSPHRASE as PASSPHRASE
from pko.testing.clusterbed import workspace_template as workspace_template
from pko.testing.waiting import condition, wait_for, wait_gone

Object = dict[str, Any]

GO_IMAGE = "docker.io/pko-test/pulumi-kubernetes-operator:v2.9.0"
GO_CHART_SETS = ("image.registry=docker.io", "image.repository=pko-test/pulumi-kubernetes-operator",
                 "image.tag=v2.9.0", "image.pullPolicy=IfNotPresent", "controller.metricsSecure=false",
                 "leaderElection.leaseDuration=15s", "leaderElection.renewDeadline=10s",
                 "leaderElection.retryPeriod=2s")
GO_NAMESPACE = "pulumi-kubernetes-operator"
GO_RELEASE = "pulumi-kubernetes-operator"
#: The Go operator's own Helm chart, in the source `make tools` builds it from (beside the repository).
GO_CHART = ROOT.parent / "shared" / "third_party" / "pulumi-kubernetes-operator" / "deploy" / "helm" / "pulumi-operator"

#: A YAML Program with one config value and a secret output: a config change is an update with new outputs.
PROGRAM = {"configuration": {"greeting": {"type": "String"}},
           "outputs": {"greeting": "${greeting}", "token": {"fn::secret": "s3cr3t"}}}

PYTHON_PROJECT = """name: pyproj
runtime:
  name: python
  options:
    toolchain: pip
    virtualenv: venv
"""
PYTHON_PROGRAM = """import pulumi

config = pulumi.Config()
pulumi.export("greeting", f"hello from {config.get('who') or 'python'}")
pulumi.export("secret", pulumi.Output.secret("s3cr3t"))
"""
YAML_PROJECT = """name: handwritten
runtime: yaml
outputs:
  answer: 42
  token:
    fn::secret: s3cr3t
"""


@dataclass
class Observed:
    """What one operator showed for one scenario, as shapes (see :func:`shape`)."""

    stack: dict[str, Any] = field(default_factory=dict)
    events: set[tuple[str, str, str]] = field(default_factory=set)
    update: dict[str, Any] = field(default_factory=dict)
    secret: dict[str, Any] = field(default_factory=dict)


def conditions(obj: Object) -> list[tuple[str, str, str, str]]:
    return sorted((c["type"], c["status"], c.get("reason", ""), c.get("message", ""))
                  for c in (obj.get("status") or {}).get("conditions") or [])


#: Status fields only pko's operator writes (docs/compatibility.md, "What pko adds"): left out of the shapes, as a
#: Go operator writes none of them; what they hold is tested in tests/e2e/test_update_metrics.py.
PKO_STATUS_ADDITIONS = frozenset({"resourceChanges", "nextRetryTime"})


def _go_fields(mapping: dict[str, Any]) -> list[str]:
    return sorted(set(mapping) - PKO_STATUS_ADDITIONS)


def stack_shape(stack: Object) -> dict[str, Any]:
    status = stack.get("status") or {}
    last = status.get("lastUpdate") or {}
    return {"conditions": conditions(stack), "status": _go_fields(status), "lastUpdate": _go_fields(last),
            "state": last.get("state"), "type": last.get("type"), "outputs": status.get("outputs"),
            "finalizers": stack["metadata"].get("finalizers")}


def update_shape(update: Object) -> dict[str, Any]:
    status = update.get("status") or {}
    # the test bed's backends are files: no permalink, whichever agent ran
    return {"conditions": conditions(update), "status": _go_fields(status), "spec": sorted(update.get("spec") or {}),
            "message": status.get("message"), "permalink": status.get("permalink")}


def secret_shape(secret: Object) -> dict[str, Any]:
    meta = secret["metadata"]
    return {"type": secret.get("type"), "immutable": secret.get("immutable"),
            "data": {k: json.loads(base64.b64decode(v)) for k, v in (secret.get("data") or {}).items()},
            "labels": sorted(meta.get("labels") or {}), "annotations": meta.get("annotations") or {},
            "owners": sorted((o["kind"], o.get("controller", False)) for o in meta.get("ownerReferences") or [])}


def events(real_cluster: cluster.Cluster, namespace: str) -> set[tuple[str, str, str]]:
    """(kind of the object, reason, type) of every event in `namespace` about our kinds."""
    items = (real_cluster.api_get(f"/api/v1/namespaces/{namespace}/events") or {}).get("items", [])
    return {(e["involvedObject"]["kind"], e["reason"], e["type"]) for e in items
            if e["involvedObject"]["kind"] in ("Stack", "Update", "Workspace", "Program")}


def scrape(real_cluster: cluster.Cluster, namespace: str) -> str:
    """The `/metrics` of the operator in `namespace`, through its Service's ClusterIP (both charts name the port
    `http-metrics`)."""
    services = (real_cluster.api_get(f"/api/v1/namespaces/{namespace}/services") or {}).get("items", [])
    service = next(s for s in services if any(p["name"] == "http-metrics" for p in s["spec"].get("ports", [])))
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "http-metrics")
    with urllib.request.urlopen(f"http://{service['spec']['clusterIP']}:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def _samples(text: str, prefix: str) -> Iterator[tuple[str, dict[str, str], float]]:
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels = dict(pair.split("=", 1) for pair in rest.rstrip("}").split(",") if "=" in pair)
        yield name, {k: v.strip('"') for k, v in labels.items()}, float(value)


def metric_families(real_cluster: cluster.Cluster, namespace: str) -> dict[str, set[str]]:
    """The operator's `pulumi_*` metric families and their label names."""
    families: dict[str, set[str]] = {}
    for name, labels, _ in _samples(scrape(real_cluster, namespace), "pulumi_"):
        families.setdefault(name, set()).update(labels)
    return families


def reconciles(real_cluster: cluster.Cluster, namespace: str, controller: str) -> float:
    """How many reconciles `controller` of the operator in `namespace` has finished since it started."""
    return sum(value for name, labels, value in _samples(scrape(real_cluster, namespace), "controller_runtime_")
               if name == "controller_runtime_reconcile_total" and labels.get("controller") == controller)


def _the_deployment(real_cluster: cluster.Cluster, namespace: str) -> dict[str, Any]:
    """The one Deployment an operator chart installed into `namespace`."""
    items = (real_cluster.api_get(f"/apis/apps/v1/namespaces/{namespace}/deployments") or {}).get("items", [])
    assert len(items) == 1, [d["metadata"]["name"] for d in items]
    found: dict[str, Any] = items[0]
    return found


def deployment(real_cluster: cluster.Cluster, namespace: str) -> str:
    """The name of the one Deployment an operator chart installed into `namespace`."""
    return str(_the_deployment(real_cluster, namespace)["metadata"]["name"])


def agent_image(real_cluster: cluster.Cluster, namespace: str) -> str:
    """The image an installed operator's workspace pods take the agent from (its `AGENT_IMAGE`)."""
    containers = _the_deployment(real_cluster, namespace)["spec"]["template"]["spec"]["containers"]
    return str(next(e["value"] for c in containers for e in c.get("env", []) if e["name"] == "AGENT_IMAGE"))


def set_agent_image(real_cluster: cluster.Cluster, namespace: str, image: str) -> None:
    """Point an installed operator's workspace pods at another agent image (its `AGENT_IMAGE`), and wait for the
    rollout: how a user runs either operator with the other's agent."""
    name = deployment(real_cluster, namespace)
    real_cluster.kubectl("set", "env", f"deployment/{name}", "-n", namespace, f"AGENT_IMAGE={image}")
    real_cluster.kubectl("rollout", "status", f"deployment/{name}", "-n", namespace, "--timeout=240s",
                         timeout=260)


def _ready_with(key: str, value: Any) -> Callable[[Object], bool]:
    def test(obj: Object) -> bool:
        return (condition(obj, "Ready").get("status") == "True"
                and ((obj.get("status") or {}).get("outputs") or {}).get(key) == value)
    return test


async def _bootstrap_image(ckc: kclient.Client, pod: str, namespace: str) -> str:
    spec = (await ckc.get(resources.POD, pod, namespace))["spec"]
    return str(next(c["image"] for c in spec["initContainers"] if c["name"] == "bootstrap"))


async def program_stack(ckc: kclient.Client, real_cluster: cluster.Cluster, namespace: str, *,
                        agent_image: str, name: str = "hello") -> Observed:
    """A Program + Stack to Ready with outputs, an update after a config change, destroy on delete."""
    seen = Observed()
    await ckc.create(resources.PROGRAM.new(name, namespace, program=PROGRAM))
    await ckc.create(resources.STACK.new(name, namespace, spec={
        "stack": "dev", "programRef": {"name": name}, "backend": "file:///tmp", "envRefs": passphrase_env(),
        "config": {"greeting": "one"}, "destroyOnFinalize": True, "workspaceTemplate": workspace_template(),
    }))
    stack = await wait_for(ckc, resources.STACK, name, namespace, _ready_with("greeting", "one"), timeout=400,
                           diagnostics=lambda: diagnose(real_cluster, namespace))
    assert stack["status"]["outputs"] == {"greeting": "one", "token": "[secret]"}
    assert await _bootstrap_image(ckc, f"{name}-workspace-0", namespace) == agent_image
    first = stack["status"]["lastUpdate"]

    await ckc.patch(resources.STACK, name, {"spec": {"config": {"greeting": "two"}}}, namespace)
    stack = await wait_for(ckc, resources.STACK, name, namespace, _ready_with("greeting", "two"), timeout=300,
                           diagnostics=lambda: diagnose(real_cluster, namespace))
    last = stack["status"]["lastUpdate"]
    assert last["name"] != first["name"], last
    assert last["state"] == "succeeded", last
    seen.stack = stack_shape(stack)
    update = await ckc.get(resources.UPDATE, last["name"], namespace)
    seen.update = update_shape(update)

    await ckc.delete(resources.STACK, name, namespace)
    await wait_gone(ckc, resources.STACK, name, namespace, 300)
    await wait_gone(ckc, resources.POD, f"{name}-workspace-0", namespace, 120)
    seen.events = events(real_cluster, namespace)
    return seen


async def trust_git_ca(ckc: kclient.Client, namespace: str, git: gitserver.GitServer) -> None:
    """The git server's CA as ConfigMap `git-ca` in `namespace`, for pods to mount at :data:`CA_DIR`."""
    await ckc.create(ca_configmap(namespace, git.ca_pem))


def trusting_workspace_template() -> dict[str, Any]:
    """:func:`workspace_template` whose `fetch` init container and `pulumi` container trust the git server's CA:
    the pod template is merged into the generated pod by container name, as a user adds a private CA."""
    template = workspace_template()
    mount = {"name": CA_CONFIGMAP, "mountPath": CA_DIR, "readOnly": True}
    template["spec"]["podTemplate"] = {"spec": {
        "volumes": [{"name": CA_CONFIGMAP, "configMap": {"name": CA_CONFIGMAP}}],
        "initContainers": [{"name": "fetch", "env": [CA_ENV], "volumeMounts": [mount]}],
        "containers": [{"name": "pulumi", "env": [CA_ENV], "volumeMounts": [mount]}],
    }}
    return template


async def python_git_stack(ckc: kclient.Client, real_cluster: cluster.Cluster, namespace: str,
                           git: gitserver.GitServer, *, agent_image: str, name: str = "py",
                           https: bool = False) -> Observed:
    """A Git-sourced Stack with a Python program (`pulumi install` makes its virtualenv in the pod): Ready with
    outputs, then destroyed on delete. `https`: from the git server's https address, the pods trusting its CA."""
    seen = Observed()
    repo = f"pko/{name}-{namespace}"  # owner/name: the Go operator refuses a repository URL with one path segment
    git.create_repo(repo, PYTHON_FILES)
    if https:
        await trust_git_ca(ckc, namespace, git)
    await ckc.create(resources.STACK.new(name, namespace, spec={
        "stack": "dev", "projectRepo": git.https_url(repo) if https else git.http_url(repo), "branch": "main",
        "backend": "file:///tmp", "envRefs": passphrase_env(), "config": {"who": "a cross-run"},
        "destroyOnFinalize": True,
        "workspaceTemplate": trusting_workspace_template() if https else workspace_template(),
    }))
    stack = await wait_for(ckc, resources.STACK, name, namespace, _ready_with("greeting", "hello from a cross-run"),
                           timeout=600, diagnostics=lambda: diagnose(real_cluster, namespace))
    assert stack["status"]["outputs"]["secret"] == "[secret]"
    assert stack["status"]["projectInfo"] == {"name": "pyproj", "runtime": "python"}
    assert await _bootstrap_image(ckc, f"{name}-workspace-0", namespace) == agent_image
    seen.stack = stack_shape(stack)
    await ckc.delete(resources.STACK, name, namespace)
    await wait_gone(ckc, resources.STACK, name, namespace, 300)
    seen.events = events(real_cluster, namespace)
    return seen


PYTHON_FILES = {"Pulumi.yaml": PYTHON_PROJECT, "requirements.txt": "pulumi>=3.0.0,<4.0.0\n",
                "__main__.py": PYTHON_PROGRAM}


async def handwritten_update(ckc: kclient.Client, real_cluster: cluster.Cluster, namespace: str,
                             git: gitserver.GitServer, *, name: str = "byhand",
                             files: dict[str, str] | None = None) -> Observed:
    """A Workspace and an `up` Update written by hand (auto.pulumi.com, no Stack) on a git source (`files`; by
    default a YAML project): the Update completes and its outputs land in a Secret."""
    seen = Observed()
    repo = f"{name}-{namespace}"
    commit = git.create_repo(repo, files or {"Pulumi.yaml": YAML_PROJECT})
    workspace = await ckc.create({"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace",
                      "metadata": {"name": name, "namespace": namespace},
                      "spec": {"image": WORKSPACE_IMAGE, "imagePullPolicy": "IfNotPresent",
                               "serviceAccountName": WORKSPACE_SERVICE_ACCOUNT,
                               "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                               "git": {"url": git.http_url(repo), "ref": commit},
                               "env": [{"name": "PULUMI_CONFIG_PASSPHRASE", "value": PASSPHRASE},
                                       {"name": "PULUMI_BACKEND_URL", "value": "file:///tmp"}],
                               "stacks": [{"name": "dev", "create": True}]}})
    await ckc.create({"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update",
                      # both operators run only an Update with a controller (else it is "orphaned": Canceled)
                      "metadata": {"name": f"{name}-up", "namespace": namespace, "ownerReferences": [{
                          "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace", "name": name,
                          "uid": workspace["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]},
                      "spec": {"workspaceName": name, "stackName": "dev", "type": "up", "message": "by hand"}})
    update = await wait_for(ckc, resources.UPDATE, f"{name}-up", namespace,
                            lambda o: condition(o, "Complete").get("status") == "True", timeout=600,
                            diagnostics=lambda: diagnose(real_cluster, namespace))
    seen.update = update_shape(update)
    failed = condition(update, "Failed").get("status")
    assert failed == "False", f"{update['status']}\n{diagnose(real_cluster, namespace)}"
    outputs = update["status"].get("outputs")
    assert outputs, update["status"]
    seen.secret = secret_shape(await ckc.get(resources.SECRET, outputs, namespace))
    await ckc.delete(resources.WORKSPACE, name, namespace)
    await wait_gone(ckc, resources.POD, f"{name}-workspace-0", namespace, 120)
    seen.events = events(real_cluster, namespace)
    return seen


def install_go_operator(real_cluster: cluster.Cluster, chart: Path, *values: str, git_ca: str | None = None
                        ) -> Release:
    """The Go reference operator installed by its own Helm chart, with the image `make images` built from its
    source, plain-HTTP metrics and fast leader election. `git_ca`: a CA (PEM) it trusts for git over https (it
    lists a Stack's branch itself), through the chart's `extraEnv`/`extraVolumes`."""
    sets = [*GO_CHART_SETS, *values]
    if git_ca is not None:
        sets += trusted_ca_values(real_cluster, GO_NAMESPACE, git_ca)
    done = helm(real_cluster, "install", GO_RELEASE, str(chart), "--namespace", GO_NAMESPACE, "--create-namespace",
                *(arg for pair in sets for arg in ("--set", pair)), "--wait", "--timeout", "240s", check=False)
    assert done.returncode == 0, f"helm install failed:\n{done.stderr}\n{diagnose(real_cluster, GO_NAMESPACE)}"
    return Release(GO_RELEASE, GO_NAMESPACE)


def go_chart() -> Path:
    assert (GO_CHART / "Chart.yaml").is_file(), f"the Go operator's chart is missing: {GO_CHART}"
    return GO_CHART


def go_release() -> Release:
    return Release(GO_RELEASE, GO_NAMESPACE)


def pko_release() -> Release:
    return Release(RELEASE, OPERATOR_NAMESPACE)


def helm_uninstall(real_cluster: cluster.Cluster, release: str, namespace: str) -> None:
    """Uninstall a release if it is installed (cleanup after a test that may have stopped anywhere)."""
    helm(real_cluster, "uninstall", release, "--namespace", namespace, "--wait", "--ignore-not-found", check=False)


async def refused_http_stack(ckc: kclient.Client, namespace: str, git: gitserver.GitServer) -> Object:
    """A Stack whose `projectRepo` is plain `http://`: the Go operator refuses it (its git URL parser takes only
    https and ssh) and stalls it; pko accepts it. Returns the Stack as the operator left it."""
    repo = f"http-{namespace}"
    git.create_repo(repo, PYTHON_FILES)
    await ckc.create(resources.STACK.new("http", namespace, spec={
        "stack": "dev", "projectRepo": git.http_url(repo), "branch": "main", "backend": "file:///tmp",
        "envRefs": passphrase_env(), "workspaceTemplate": workspace_template(),
    }))
    return await wait_for(ckc, resources.STACK, "http", namespace,
                          lambda o: condition(o, "Stalled").get("status") == "True", timeout=120)
