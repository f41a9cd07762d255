"""Stacks whose programs deploy an app that a real Prometheus scrapes, and StackRollouts gated on a PromQL query of
it (docs/rollouts.md): a change that keeps the app healthy goes through both waves, one that makes it unhealthy is
rolled back after its first wave, the gate's status naming the sample that failed it.

Each Stack runs a Pulumi YAML Program with the Kubernetes provider (its plugin from the operator's dependency cache,
whose upstream is the test bed's plugin mirror) that makes, in the Stack's namespace, one Pod serving
``pko_demo_app_healthy{stack="<Stack name>"} <healthy>`` at ``:8080/metrics``, where ``healthy`` is the Stack's config
key of that name (default 1). The value is in the container's arguments, so a config change replaces the Pod. A
Prometheus on this machine (:mod:`pko.testing.prometheus`) discovers those Pods through the cluster's API and
scrapes their IPs, so a query of the metric says what each Stack deployed.

:func:`workload_program`, :func:`stack_manifest`, :func:`grant_workspace`, :func:`stack_ready`,
:func:`start_prometheus` and :func:`wait_scraped` are the pieces both tests use. For the rollouts, Prometheus listens
on the node's address: the gate's query is sent by the operator, from its pod.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import cluster, images, programs, prometheus
from pko.testing.clusterbed import Release, diagnose, passphrase_env, state_dir, workspace_template
from pko.testing.waiting import condition, eventually, wait_for

METRIC = "pko_demo_app_healthy"
METRICS_PORT = 8080
#: The label on the app's Pods that the Prometheus of these tests scrapes by.
SCRAPE_LABEL = ("pko.test/scrape", "demo-app")
STACKS = ("alpha", "beta")

#: The app: Prometheus text at /metrics, its stack label and value from its arguments (`--stack=`, `--healthy=`: an
#: argument that is a bare `${healthy}` would be the config value's own type, and a number there is refused by the
#: API server); it exits on SIGTERM (as PID 1 it would otherwise ignore it until the grace period ends). No `${` in
#: it: Pulumi YAML would interpolate that.
APP = """
import http.server, signal, sys
args = dict(arg.split("=", 1) for arg in sys.argv[1:])
stack, value = args["--stack"], args["--healthy"]
body = ('# TYPE pko_demo_app_healthy gauge\\npko_demo_app_healthy{stack="%s"} %s\\n' % (stack, value)).encode()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
class Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/metrics":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *_):
        pass
http.server.HTTPServer(("", 8080), Metrics).serve_forever()
"""


def workload_program(name: str, namespace: str) -> dict[str, Any]:
    """A Program `name` in `namespace` whose Stacks each make one Pod of the app in `namespace`, as the workspace's
    account (see :func:`grant_workspace`). Config: `app` (required; the metric's `stack` label, the Stack's name by
    :func:`stack_manifest`) and `healthy` (the metric's value, default "1"); both in the container's arguments, so
    a change of either replaces the Pod (autonamed, so the new one is made before the old one goes). Output `pod`:
    the Pod's name. The provider version is pinned: without it the CLI asks GitHub for the latest release."""
    pod_security = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                    "seccompProfile": {"type": "RuntimeDefault"}}
    container_security = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                          "runAsNonRoot": True, "runAsUser": 1000}
    probe = {"httpGet": {"path": "/metrics", "port": METRICS_PORT}, "periodSeconds": 1}
    pod = {
        "type": "kubernetes:core/v1:Pod",
        "options": {"version": programs.KUBERNETES_VERSION},
        "properties": {
            "metadata": {"namespace": namespace,
                         "labels": {SCRAPE_LABEL[0]: SCRAPE_LABEL[1], "pko.test/stack": "${app}"}},
            "spec": {
                "securityContext": pod_security,
                "terminationGracePeriodSeconds": 5,
                "containers": [{
                    "name": "app", "image": images.PYTHON_BASE_REF, "imagePullPolicy": "Never",
                    "command": ["python3", "-c", APP], "args": ["--stack=${app}", "--healthy=${healthy}"],
                    "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
                    "readinessProbe": probe,
                    "securityContext": container_security,
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                }],
            },
        },
    }
    return resources.PROGRAM.new(name, namespace, program={
        "configuration": {"app": {"type": "String"}, "healthy": {"type": "String", "default": "1"}},
        "resources": {"workload": pod},
        "outputs": {"pod": "${workload.metadata.name}"},
    })


def stack_manifest(name: str, namespace: str, program: str, state: Path, healthy: str | None = None,
                   **spec: Any) -> dict[str, Any]:
    """A Stack `name` of :func:`workload_program` `program`, its `app` config its own name (`healthy` set when
    given), its state in `state` on the node (:func:`pko.testing.clusterbed.state_dir`: it outlives any workspace
    pod, so the destroy on deletion finds the Pod to remove). `spec` adds to or overrides its spec."""
    config = {"app": name, **({"healthy": healthy} if healthy is not None else {})}
    pod = {"volumes": [{"name": "state", "hostPath": {"path": str(state), "type": "Directory"}}],
           "containers": [{"name": "pulumi", "volumeMounts": [{"name": "state", "mountPath": "/state"}]}]}
    return resources.STACK.new(name, namespace, spec={
        "stack": "dev", "programRef": {"name": program}, "backend": "file:///state", "envRefs": passphrase_env(),
        "config": config, "destroyOnFinalize": True,
        "workspaceTemplate": workspace_template(resources={"requests": {"cpu": "50m", "memory": "256Mi"}},
                                                podTemplate={"spec": pod}),
        **spec,
    })


def grant_workspace(real_cluster: cluster.Cluster, namespace: str) -> None:
    """Let the namespace's workspace account make the app's Pod, as a user grants it for such a program."""
    real_cluster.kubectl("create", "rolebinding", "pulumi-edit", "--clusterrole=edit",
                         f"--serviceaccount={namespace}:pulumi", "-n", namespace)


def stack_ready(obj: dict[str, Any]) -> bool:
    """The Stack is Ready at its current generation, its last update succeeded."""
    status = obj.get("status") or {}
    last = status.get("lastUpdate") or {}
    generation = obj["metadata"]["generation"]
    return (condition(obj, "Ready").get("status") == "True" and status.get("observedGeneration") == generation
            and last.get("generation") == generation and last.get("state") == "succeeded")


def start_prometheus(real_cluster: cluster.Cluster, workdir: Path, namespace: str,
                     host: str | None = None) -> prometheus.Prometheus:
    """A Prometheus that scrapes the app's Pods in `namespace` (stop it when done), on loopback or `host`."""
    return prometheus.start(workdir, real_cluster.kubeconfig, [namespace], SCRAPE_LABEL, METRICS_PORT,
                            **({"host": host} if host else {}))


async def scraped(server: prometheus.Prometheus, namespace: str) -> dict[str, tuple[str, float]]:
    """The app's series in `namespace` as Prometheus last scraped them: Stack name → (Pod, value)."""
    samples = await asyncio.to_thread(server.query, f'{METRIC}{{namespace="{namespace}"}}')
    return {labels["stack"]: (labels["pod"], value) for labels, value in samples}


async def wait_scraped(server: prometheus.Prometheus, real_cluster: cluster.Cluster, namespace: str,
                       expected: dict[str, tuple[str, float]], timeout: float = 90) -> None:
    """Until :func:`scraped` is `expected`; else fail with what Prometheus has, its targets and log, and the
    namespace's diagnostics."""
    async def as_expected() -> bool:
        return await scraped(server, namespace) == expected
    try:
        await eventually(as_expected, f"Prometheus to scrape {expected}", timeout=timeout, interval=1)
    except AssertionError as err:
        raise AssertionError(f"{err}; it has {await scraped(server, namespace)}\ntargets: "
                             f"{await asyncio.to_thread(server.targets)}\n{server.log()}\n"
                             f"{diagnose(real_cluster, namespace)}") from None


@pytest.mark.timeout(900)  # two Stacks' first updates (each installs the provider plugin), then a replacement
async def test_prometheus_scrapes_what_stacks_deployed(ckc: kclient.Client, cnamespace: str,
                                                       real_cluster: cluster.Cluster, operator_release: Release,
                                                       tmp_path: Path) -> None:
    ns = cnamespace
    grant_workspace(real_cluster, ns)
    await ckc.create(workload_program("app", ns))
    for name in STACKS:
        await ckc.create(stack_manifest(name, ns, "app", state_dir(tmp_path / "state", name)))
    server = await asyncio.to_thread(start_prometheus, real_cluster, tmp_path / "prometheus", ns)
    try:
        stacks = {name: await wait_for(ckc, resources.STACK, name, ns, stack_ready, timeout=420,
                                       diagnostics=lambda: diagnose(real_cluster, ns)) for name in STACKS}
        pods = {name: stack["status"]["outputs"]["pod"] for name, stack in stacks.items()}
        await wait_scraped(server, real_cluster, ns, {name: (pods[name], 1.0) for name in STACKS})
        for name in STACKS:
            pod = await ckc.get(resources.POD, pods[name], ns)
            assert pod["metadata"]["labels"][SCRAPE_LABEL[0]] == SCRAPE_LABEL[1], pod["metadata"]
            assert pod["spec"]["containers"][0]["args"] == [f"--stack={name}", "--healthy=1"], pod["spec"]

        # a config change replaces the Pod, and Prometheus sees the new value (what a health gate will query)
        await ckc.patch(resources.STACK, "beta", {"spec": {"config": {"healthy": "0"}}}, ns)
        beta = await wait_for(ckc, resources.STACK, "beta", ns,
                              lambda o: stack_ready(o) and o["metadata"]["generation"] > 1, timeout=300,
                              diagnostics=lambda: diagnose(real_cluster, ns))
        assert beta["status"]["lastUpdate"]["resourceChanges"].get("replace") == 1, beta["status"]["lastUpdate"]
        replaced = beta["status"]["outputs"]["pod"]
        assert replaced != pods["beta"]
        await wait_scraped(server, real_cluster, ns, {"alpha": (pods["alpha"], 1.0), "beta": (replaced, 0.0)})
    finally:
        server.stop()


def _rollout(name: str, namespace: str, healthy: str, server: prometheus.Prometheus) -> dict[str, Any]:
    """Both Stacks, one wave each, to `healthy`; gated on the lowest value the app reports in `namespace`."""
    return resources.STACK_ROLLOUT.new(name, namespace, spec={
        "selector": {"matchExpressions": [{"key": "pko.test/demo", "operator": "Exists"}]},
        "revision": {"config": {"healthy": healthy}},
        "waves": [{"name": "first", "selector": {"matchLabels": {"pko.test/demo": "alpha"}}, "bake": "20s"},
                  {"name": "second", "percent": 100, "bake": "2s"}],
        "gates": [{"name": "app-healthy", "interval": "2s", "failureLimit": 2, "prometheus": {
            "address": server.url, "query": f'min({METRIC}{{namespace="{namespace}"}})', "min": 1}}],
    })


def _labelled(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    manifest["metadata"]["labels"] = {"pko.test/demo": name}
    return manifest


def _phase(*phases: str) -> Any:
    return lambda obj: (obj.get("status") or {}).get("phase") in phases


@pytest.mark.timeout(1200)
async def test_a_promql_gate_on_what_stacks_deployed_passes_a_healthy_change_and_rolls_a_bad_one_back(
        ckc: kclient.Client, cnamespace: str, real_cluster: cluster.Cluster, operator_release: Release,
        tmp_path: Path) -> None:
    ns = cnamespace
    grant_workspace(real_cluster, ns)
    await ckc.create(workload_program("app", ns))
    for name in STACKS:
        await ckc.create(_labelled(stack_manifest(name, ns, "app", state_dir(tmp_path / "state", name)), name))
    server = await asyncio.to_thread(start_prometheus, real_cluster, tmp_path / "prometheus", ns,
                                     real_cluster.node_ip)
    try:
        stacks = {name: await wait_for(ckc, resources.STACK, name, ns, stack_ready, timeout=420,
                                       diagnostics=lambda: diagnose(real_cluster, ns)) for name in STACKS}
        pods = {name: stack["status"]["outputs"]["pod"] for name, stack in stacks.items()}
        await wait_scraped(server, real_cluster, ns, {name: (pods[name], 1.0) for name in STACKS})

        # healthy stays 1: the gate's query passes after each wave and the rollout completes
        await ckc.create(_rollout("keep-healthy", ns, "1", server))
        done = await wait_for(ckc, resources.STACK_ROLLOUT, "keep-healthy", ns,
                              _phase("Completed", "RolledBack"), timeout=420,
                              diagnostics=lambda: diagnose(real_cluster, ns))
        assert done["status"]["phase"] == "Completed", done["status"]
        [gate] = done["status"]["gates"]
        assert (gate["name"], gate["result"]) == ("app-healthy", "Passed"), gate
        assert gate["message"] == "1 sample, all within [1, +inf]", gate

        # healthy becomes 0: after the first wave Prometheus reports alpha's new Pod at 0, the gate fails twice,
        # alpha goes back to 1 and beta is never touched
        await ckc.create(_rollout("make-unhealthy", ns, "0", server))
        back = await wait_for(ckc, resources.STACK_ROLLOUT, "make-unhealthy", ns,
                              _phase("Completed", "RolledBack"), timeout=420,
                              diagnostics=lambda: diagnose(real_cluster, ns))
        status = back["status"]
        assert status["phase"] == "RolledBack", status
        assert {s["name"]: s["state"] for s in status["stacks"]} == {"alpha": "RolledBack", "beta": "Skipped"}
        [gate] = status["gates"]
        assert gate["result"] == "Failed", gate
        assert gate["message"].startswith("1 of 1 sample is not within [1, +inf]: {"), gate
        assert gate["message"].endswith("} 0"), gate
        assert status["message"].startswith("rolled back (gate app-healthy failed 2 checks in a row in wave first")
        assert condition(back, "Stalled")["reason"] == "GateFailed"

        alpha = await ckc.get(resources.STACK, "alpha", ns)
        assert alpha["spec"]["config"]["healthy"] == "1"
        beta = await ckc.get(resources.STACK, "beta", ns)
        assert beta["status"]["outputs"]["pod"] == pods["beta"]  # never replaced
        await wait_scraped(server, real_cluster, ns, {"alpha": (alpha["status"]["outputs"]["pod"], 1.0),
                                                      "beta": (pods["beta"], 1.0)})
    finally:
        server.stop()
