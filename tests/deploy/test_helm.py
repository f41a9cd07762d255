"""The Helm chart, linted and rendered by the real `helm`: values, arguments, environment, RBAC and CRDs."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from helmchart import CHART, Render, run_helm

from pko.api import crds

# The reference's manager ClusterRole (operator/config/rbac/role.yaml, pko-v2.md §6), one tuple per permission,
# with pko's additions: `spec.outputs` (docs/outputs.md) creates and updates the ConfigMap and Secret a Stack owns.
MANAGER_RULES = [
    ("", "configmaps", "create get list update watch"),
    ("", "events", "create patch update"),
    ("", "events", "list"),  # pko: a refused workspace pod is named only in its StatefulSet's FailedCreate event
    ("", "pods", "create delete get list patch update watch"),
    ("", "services", "create delete get list patch update watch"),
    ("", "secrets", "create get list update watch"),
    ("apps", "statefulsets", "create delete get list patch update watch"),
    ("auto.pulumi.com", "updates", "create delete get list patch update watch"),
    ("auto.pulumi.com", "workspaces", "create delete get list patch update watch"),
    ("auto.pulumi.com", "updates/finalizers", "update"),
    ("auto.pulumi.com", "workspaces/finalizers", "update"),
    ("auto.pulumi.com", "updates/status", "get patch update"),
    ("auto.pulumi.com", "workspaces/status", "get patch update"),
    ("auto.pulumi.com", "workspaces/rpc", "use"),
    ("pulumi.com", "programs", "create delete get list patch update watch"),
    ("pulumi.com", "stacks", "create delete get list patch update watch"),
    ("pulumi.com", "programs/finalizers", "update"),
    ("pulumi.com", "stacks/finalizers", "update"),
    ("pulumi.com", "programs/status", "get patch update"),
    ("pulumi.com", "stacks/status", "get patch update"),
    # pko: approvals (docs/approvals.md)
    ("pulumi.com", "stackapprovals", "get list watch"),
    ("pulumi.com", "stackapprovals/status", "get patch update"),
    # pko: rollouts (docs/rollouts.md)
    ("pulumi.com", "stackrollouts", "get list watch"),
    ("pulumi.com", "stackrollouts/status", "get patch update"),
    ("source.toolkit.fluxcd.io", "buckets", "get list watch"),
    ("source.toolkit.fluxcd.io", "gitrepositories", "get list watch"),
    ("source.toolkit.fluxcd.io", "ocirepositories", "get list watch"),
]
Permission = tuple[str, str, str, str]  # group, resource, verb, resourceName ("" = any)


def permissions(rules: Iterable[dict[str, Any]]) -> set[Permission]:
    found: set[Permission] = set()
    for rule in rules:
        if "nonResourceURLs" in rule:
            found |= {("", url, verb, "") for url in rule["nonResourceURLs"] for verb in rule["verbs"]}
            continue
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or [""]:
                        found.add((group, resource, verb, name))
    return found


def expected(table: Iterable[tuple[str, str, str]], name: str = "") -> set[Permission]:
    return {(group, resource, verb, name) for group, resource, verbs in table for verb in verbs.split()}


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name or ''}: {[o['metadata']['name'] for o in found]}"
    return found[0]


def kinds(objects: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for o in objects:
        out.setdefault(o["kind"], []).append(o["metadata"]["name"])
    return out


def manager(objects: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = one(objects, "Deployment")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "manager")


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


CHART_META = yaml.safe_load((CHART / "Chart.yaml").read_text())
DEFAULT_IMAGE = f"docker.io/pko/pko:{CHART_META['appVersion']}"


# --- lint --------------------------------------------------------------------------------------------------------

CUSTOM_VALUES: dict[str, Any] = {
    "deploymentStrategy": "Recreate",
    "replicaCount": 2,
    "terminationGracePeriodSeconds": 900,
    "image": {"registry": "registry.example.com", "repository": "platform/pko", "tag": "v9.9.9",
              "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "regcred"}],
    "controller": {"logLevel": "debug", "logFormat": "json", "metricsSecure": False,
                   "advertisedAddress": "pko.example.internal", "maxConcurrentReconciles": 50},
    "leaderElection": {"leaseDuration": "30s", "renewDeadline": "20s", "retryPeriod": "5s"},
    "kubeAPI": {"timeout": "1m"},
    "flux": {"maxUntarSizeBytes": 1048576},
    "extraEnv": [{"name": "PULUMI_SKIP_UPDATE_CHECK", "value": "true"}],
    "rbac": {"createRole": True, "createClusterAggregationRoles": False,
             "extraRules": [{"apiGroups": ["source.example.com"], "resources": ["artifacts"],
                             "verbs": ["get", "list", "watch"]}]},
    "crds": {"install": False},
    "fullnameOverride": "platform-pko",
    "serviceAccount": {"name": "pko-operator", "annotations": {"iam.example.com/role": "pko"}},
    "workspaces": {"serviceAccounts": [{"namespace": "team-a", "name": "pulumi"}],
                   "networkPolicyNamespaces": ["team-a", "team-b"]},
    "podAnnotations": {"example.com/pod": "yes"},
    "deploymentAnnotations": {"example.com/deployment": "yes"},
    "serviceAnnotations": {"example.com/service": "yes"},
    "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "pko", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}]}}},
    "extraVolumes": [{"name": "ca", "configMap": {"name": "corporate-ca"}}],
    "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/ssl/corporate"}],
    "extraPorts": [{"name": "http-extra", "containerPort": 9091, "protocol": "TCP"}],
    "podLabels": {"team": "platform"},
    "initContainers": [{"name": "wait", "image": "busybox:1.36", "command": ["true"]}],
    "extraSidecars": [{"name": "proxy", "image": "envoyproxy/envoy:v1.31.0"}],
    "serviceMonitor": {"enabled": True, "interval": "30s", "timeout": "10s", "labels": {"release": "prom"},
                       "targetLabels": ["team"], "metricRelabelings": [{"action": "drop", "regex": "go_.*"}]},
}


@pytest.mark.parametrize("custom", [False, True], ids=["default-values", "custom-values"])
def test_helm_lint_strict(helm: Path, tmp_path: Path, custom: bool) -> None:
    args = ["lint", str(CHART), "--strict"]
    if custom:
        values = tmp_path / "values.yaml"
        values.write_text(yaml.safe_dump(CUSTOM_VALUES))
        args += ["--values", str(values)]
    out = run_helm(helm, *args)
    assert "0 chart(s) failed" in out


# --- default values ----------------------------------------------------------------------------------------------

def test_default_objects(render: Render) -> None:
    objects = render()
    assert {k: sorted(v) for k, v in kinds(objects).items()} == {
        "ServiceAccount": ["pko-pulumi-kubernetes-operator"],
        "CustomResourceDefinition": sorted(m["metadata"]["name"] for m in crds.all_crds().values()),
        "ClusterRole": sorted(["pko-pulumi-kubernetes-operator-controller-manager",
                               "pko-pulumi-kubernetes-operator-metrics-auth-role",
                               "pko-pulumi-kubernetes-operator-metrics-reader",
                               "pko-pulumi-kubernetes-operator-edit", "pko-pulumi-kubernetes-operator-view",
                               "pko-pulumi-kubernetes-operator-stack-approver"]),  # pko approvals
        "ClusterRoleBinding": sorted(["pko-pulumi-kubernetes-operator-controller-manager",
                                      "pko-pulumi-kubernetes-operator-metrics-auth-rolebinding"]),
        "Role": sorted(["pko-pulumi-kubernetes-operator-leader-election-role",
                        "pko-pulumi-kubernetes-operator-token-request-role"]),
        "RoleBinding": sorted(["pko-pulumi-kubernetes-operator-leader-election-rolebinding",
                               "pko-pulumi-kubernetes-operator-token-request-rolebinding"]),
        "Service": ["pko-pulumi-kubernetes-operator"],
        "Deployment": ["pko-pulumi-kubernetes-operator-controller-manager"],
    }
    for o in objects:
        if o["kind"] not in ("ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"):
            assert o["metadata"]["namespace"] == "pko-system", o["metadata"]


def test_release_name_containing_the_chart_name_is_the_full_name(render: Render) -> None:
    objects = render(release="pulumi-kubernetes-operator")
    assert one(objects, "Service")["metadata"]["name"] == "pulumi-kubernetes-operator"
    assert one(objects, "Deployment")["metadata"]["name"] == "pulumi-kubernetes-operator-controller-manager"
    one(objects, "ClusterRole", "pulumi-kubernetes-operator-controller-manager")


def test_default_deployment(render: Render) -> None:
    objects = render()
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = manager(objects)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate"}
    assert pod["serviceAccountName"] == "pko-pulumi-kubernetes-operator"
    assert pod["terminationGracePeriodSeconds"] == 300
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532}
    assert container["image"] == DEFAULT_IMAGE
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert "command" not in container  # the image's ENTRYPOINT (tini) runs the args
    assert container["args"] == [
        "pko", "operator", "--leader-elect", "--health-probe-bind-address=:8081", "--metrics-bind-address=:8383",
        "--metrics-secure=true", "--program-fs-addr=:9090",
        "--program-fs-adv-addr=pko-pulumi-kubernetes-operator.$(POD_NAMESPACE):80",
        "--zap-log-level=info", "--zap-encoder=console", "--zap-time-encoding=iso8601",
    ]
    assert env_of(container) == {
        "POD_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
        "POD_SA_NAME": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}},
        "AGENT_IMAGE": DEFAULT_IMAGE,
        "AGENT_IMAGE_PULL_POLICY": "IfNotPresent",
    }
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"http-metrics": 8383,
                                                                           "http-fileserver": 9090}
    assert container["livenessProbe"] == {"httpGet": {"path": "/healthz", "port": 8081}, "initialDelaySeconds": 15,
                                          "periodSeconds": 20}
    # pko: readiness from the first second, every 2 s (the reference: 5 s, then every 10 s)
    assert container["readinessProbe"] == {"httpGet": {"path": "/readyz", "port": 8081}, "initialDelaySeconds": 1,
                                           "periodSeconds": 2}
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    # pko: a CPU limit of 1 so that a (re)started operator is not throttled through its Python start-up
    assert container["resources"] == {"limits": {"cpu": "1", "memory": "256Mi"},
                                      "requests": {"cpu": "200m", "memory": "128Mi"}}
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == labels == {
        "app.kubernetes.io/name": "pulumi-kubernetes-operator", "app.kubernetes.io/instance": "pko"}


def test_default_service(render: Render) -> None:
    objects = render()
    service = one(objects, "Service")
    assert service["spec"]["selector"] == one(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        ("http-fileserver", 80, "http-fileserver"), ("http-metrics", 8383, "http-metrics")]


def test_default_rbac(render: Render) -> None:
    objects = render()
    sa = "pko-pulumi-kubernetes-operator"
    subject = [{"kind": "ServiceAccount", "name": sa, "namespace": "pko-system"}]

    cluster_role = one(objects, "ClusterRole", f"{sa}-controller-manager")
    assert permissions(cluster_role["rules"]) == expected(MANAGER_RULES)
    binding = one(objects, "ClusterRoleBinding", f"{sa}-controller-manager")
    assert binding["roleRef"]["name"] == cluster_role["metadata"]["name"]
    assert binding["subjects"] == subject

    leader = one(objects, "Role", f"{sa}-leader-election-role")
    assert permissions(leader["rules"]) == expected([
        ("", "configmaps", "get list watch create update patch delete"),
        ("coordination.k8s.io", "leases", "get list watch create update patch delete"),
        ("", "events", "create patch"),
    ])
    token = one(objects, "Role", f"{sa}-token-request-role")
    assert permissions(token["rules"]) == {("", "serviceaccounts/token", "create", sa)}
    for name, role in ((f"{sa}-leader-election-rolebinding", leader), (f"{sa}-token-request-rolebinding", token)):
        rb = one(objects, "RoleBinding", name)
        assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                 "name": role["metadata"]["name"]}
        assert rb["subjects"] == subject

    metrics_auth = one(objects, "ClusterRole", f"{sa}-metrics-auth-role")
    assert permissions(metrics_auth["rules"]) == {
        ("authentication.k8s.io", "tokenreviews", "create", ""),
        ("authorization.k8s.io", "subjectaccessreviews", "create", "")}
    assert one(objects, "ClusterRoleBinding", f"{sa}-metrics-auth-rolebinding")["subjects"] == subject
    assert permissions(one(objects, "ClusterRole", f"{sa}-metrics-reader")["rules"]) == {("", "/metrics", "get", "")}

    edit = one(objects, "ClusterRole", f"{sa}-edit")
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert permissions(edit["rules"]) == expected([
        (g, "*", "create delete deletecollection patch update") for g in ("pulumi.com", "auto.pulumi.com")])
    view = one(objects, "ClusterRole", f"{sa}-view")
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert permissions(view["rules"]) == expected([(g, "*", "get list watch") for g in ("pulumi.com",
                                                                                         "auto.pulumi.com")])


def test_default_crds_are_the_generated_ones_and_kept(render: Render) -> None:
    rendered = {o["metadata"]["name"]: o for o in render() if o["kind"] == "CustomResourceDefinition"}
    for manifest in crds.all_crds().values():
        got = rendered[manifest["metadata"]["name"]]
        assert got["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert got["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert {**got, "metadata": {"name": got["metadata"]["name"]}} == yaml.safe_load(crds.render(manifest))


def test_chart_crd_files_match_deploy_crds() -> None:
    """files/crds/ (what the chart renders) is byte-for-byte deploy/crds/ (`python -m pko.deploy.quickstart`)."""
    ours = {p.name: p.read_text() for p in sorted((CHART / "files" / "crds").glob("*.yaml"))}
    theirs = {p.name: p.read_text() for p in sorted((CHART.parents[1] / "crds").glob("*.yaml"))}
    assert ours == theirs
    assert set(ours) == set(crds.all_crds())


# --- CRD install and upgrade ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("values", "upgrade", "present"), [
    ({}, False, True),
    ({}, True, True),
    ({"crds": {"upgrade": False}}, False, True),
    ({"crds": {"upgrade": False}}, True, False),
    ({"crds": {"install": False}}, False, False),
    ({"crds": {"install": False}}, True, False),
], ids=["install", "upgrade", "install-only-on-install", "install-only-on-upgrade", "off-install", "off-upgrade"])
def test_crds_per_values(render: Render, values: dict[str, Any], upgrade: bool, present: bool) -> None:
    objects = render(values, *(["--is-upgrade"] if upgrade else []))
    names = sorted(o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition")
    assert names == (sorted(m["metadata"]["name"] for m in crds.all_crds().values()) if present else [])
    assert any(o["kind"] == "Deployment" for o in objects)


# --- custom values -----------------------------------------------------------------------------------------------

def test_custom_deployment(render: Render) -> None:
    objects = render(CUSTOM_VALUES)
    deployment = one(objects, "Deployment", "platform-pko-controller-manager")
    assert deployment["metadata"]["annotations"] == {"example.com/deployment": "yes"}
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "Recreate"}
    assert spec["template"]["metadata"]["annotations"] == {"kubectl.kubernetes.io/default-container": "manager",
                                                           "example.com/pod": "yes"}
    assert spec["template"]["metadata"]["labels"]["team"] == "platform"
    assert pod["serviceAccountName"] == "pko-operator"
    assert pod["terminationGracePeriodSeconds"] == 900
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"] == CUSTOM_VALUES["nodeSelector"]
    assert pod["tolerations"] == CUSTOM_VALUES["tolerations"]
    assert pod["affinity"] == CUSTOM_VALUES["affinity"]
    assert pod["volumes"] == CUSTOM_VALUES["extraVolumes"]
    assert pod["initContainers"] == CUSTOM_VALUES["initContainers"]
    assert [c["name"] for c in pod["containers"]] == ["manager", "proxy"]

    container = manager(objects)
    image = "registry.example.com/platform/pko:v9.9.9"
    assert container["image"] == image
    assert container["imagePullPolicy"] == "Always"
    assert container["args"] == [
        "pko", "operator", "--leader-elect", "--health-probe-bind-address=:8081", "--metrics-bind-address=:8383",
        "--metrics-secure=false", "--program-fs-addr=:9090", "--program-fs-adv-addr=pko.example.internal:80",
        "--zap-log-level=debug", "--zap-encoder=json", "--zap-time-encoding=iso8601",
    ]
    assert env_of(container) == {
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "POD_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
        "POD_SA_NAME": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}},
        "AGENT_IMAGE": image,
        "AGENT_IMAGE_PULL_POLICY": "Always",
        "LEADER_ELECTION_LEASE_DURATION": "30s",
        "LEADER_ELECTION_RENEW_DEADLINE": "20s",
        "LEADER_ELECTION_RETRY_PERIOD": "5s",
        "KUBE_API_TIMEOUT": "1m",
        "FLUX_MAX_UNTAR_SIZE_BYTES": "1048576",
        "MAX_CONCURRENT_RECONCILES": "50",
    }
    assert [p["containerPort"] for p in container["ports"]] == [8383, 9090, 9091]
    assert container["volumeMounts"] == CUSTOM_VALUES["extraVolumeMounts"]
    # Helm merges maps with the defaults (`cpu: null` would drop the default CPU limit).
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"},
                                      "limits": {"cpu": "1", "memory": "512Mi"}}


def test_custom_rbac_and_extras(render: Render) -> None:
    objects = render(CUSTOM_VALUES)
    found = kinds(objects)
    assert "CustomResourceDefinition" not in found
    assert "platform-pko-edit" not in found["ClusterRole"]
    assert "platform-pko-view" not in found["ClusterRole"]
    extra = expected([("source.example.com", "artifacts", "get list watch")])
    cluster_role = one(objects, "ClusterRole", "platform-pko-controller-manager")
    assert permissions(cluster_role["rules"]) == expected(MANAGER_RULES) | extra
    role = one(objects, "Role", "platform-pko-controller-manager")  # rbac.createRole: the same rules, namespaced
    assert role["metadata"]["namespace"] == "pko-system"
    assert permissions(role["rules"]) == expected(MANAGER_RULES) | extra
    binding = one(objects, "RoleBinding", "platform-pko-controller-manager")
    assert binding["roleRef"]["kind"] == "Role"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "pko-operator", "namespace": "pko-system"}]
    token = one(objects, "Role", "platform-pko-token-request-role")
    assert permissions(token["rules"]) == {("", "serviceaccounts/token", "create", "pko-operator")}

    sa = one(objects, "ServiceAccount", "pko-operator")
    assert sa["metadata"]["annotations"] == {"iam.example.com/role": "pko"}
    workspace_sa = one(objects, "ServiceAccount", "pulumi")
    assert workspace_sa["metadata"]["namespace"] == "team-a"
    delegator = one(objects, "ClusterRoleBinding", "team-a:pulumi:system:auth-delegator")
    assert delegator["roleRef"]["name"] == "system:auth-delegator"
    assert delegator["subjects"] == [{"kind": "ServiceAccount", "name": "pulumi", "namespace": "team-a"}]

    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert sorted(p["metadata"]["namespace"] for p in policies) == ["team-a", "team-b"]
    for policy in policies:
        assert policy["metadata"]["name"] == "allow-workspace-rpc"
        assert policy["spec"]["podSelector"] == {"matchLabels": {"auto.pulumi.com/component": "workspace"}}
        (rule,) = policy["spec"]["ingress"]
        assert rule["ports"] == [{"protocol": "TCP", "port": "grpc"}]
        (peer,) = rule["from"]
        assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "pko-system"}}
        # The operator's pods carry these labels (the reference quickstart's pods do not, so its policy blocks them).
        pod_labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
        assert peer["podSelector"]["matchLabels"].items() <= pod_labels.items()

    service = one(objects, "Service", "platform-pko")
    assert service["metadata"]["annotations"] == {"example.com/service": "yes"}
    monitor = one(objects, "ServiceMonitor", "platform-pko")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["targetLabels"] == ["team"]
    assert monitor["spec"]["endpoints"] == [{"port": "http-metrics", "path": "/metrics", "interval": "30s",
                                             "scrapeTimeout": "10s",
                                             "metricRelabelings": [{"action": "drop", "regex": "go_.*"}]}]


def test_rbac_off_renders_no_rbac(render: Render) -> None:
    objects = render({"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "existing"},
                      "workspaces": {"serviceAccounts": [{"namespace": "default", "name": "pulumi"}]}})
    found = kinds(objects)
    assert not {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} & set(found)
    assert found["ServiceAccount"] == ["pulumi"]  # the workspace SA, not the operator's
    assert one(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "existing"


def test_image_without_registry_and_names(render: Render) -> None:
    objects = render({"image": {"registry": "", "repository": "localhost:5000/pko", "tag": "dev"},
                      "names": {"deployment": "controller-manager", "service": "fileserver"}})
    assert manager(objects)["image"] == "localhost:5000/pko:dev"
    assert env_of(manager(objects))["AGENT_IMAGE"] == "localhost:5000/pko:dev"
    one(objects, "Deployment", "controller-manager")
    one(objects, "Service", "fileserver")
    assert "--program-fs-adv-addr=fileserver.$(POD_NAMESPACE):80" in manager(objects)["args"]


# --- the reference's values ----------------------------------------------------------------------------------------

# Every value of the reference chart (pko-v2.md §6), with its default where pko keeps it (None: any default).
REFERENCE_VALUES: dict[str, Any] = {
    "deploymentStrategy": "", "replicaCount": 1, "terminationGracePeriodSeconds": 300,
    "image.registry": "docker.io", "image.repository": None, "image.pullPolicy": "IfNotPresent", "image.tag": "",
    "imagePullSecrets": None, "controller.logLevel": "info", "controller.logFormat": "console",
    "controller.metricsSecure": True, "controller.advertisedAddress": None,
    "leaderElection.leaseDuration": None, "leaderElection.renewDeadline": None, "leaderElection.retryPeriod": None,
    "kubeAPI.timeout": None, "flux.maxUntarSizeBytes": None, "extraEnv": [],
    "rbac.create": True, "rbac.createClusterRole": True, "rbac.createRole": False,
    "rbac.createClusterAggregationRoles": True, "rbac.extraRules": [],
    "nameOverride": "", "fullnameOverride": "",
    "serviceAccount.create": True, "serviceAccount.annotations": {}, "serviceAccount.name": "",
    "podAnnotations": {}, "deploymentAnnotations": {}, "serviceAnnotations": {},
    "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532},
    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    "resources": None,  # pko: a CPU limit of 1 instead of 200m (docs/performance.md)
    "nodeSelector": {}, "tolerations": [], "affinity": {}, "extraVolumes": None, "extraVolumeMounts": None,
    "extraPorts": None, "podLabels": {}, "initContainers": [], "extraSidecars": [], "serviceMonitor.enabled": False,
}


def test_values_has_every_reference_value() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for dotted, default in REFERENCE_VALUES.items():
        node: Any = values
        for part in dotted.split("."):
            assert isinstance(node, dict), f"values.yaml: {dotted} is not under a mapping"
            assert part in node, f"values.yaml lacks {dotted}"
            node = node[part]
        if default is not None:
            assert node == default, f"{dotted}: {node!r} != reference default {default!r}"


def test_probes_are_values(render: Render) -> None:
    """A team that wants other probe timings (or a startupProbe's patience in the readiness probe) sets them."""
    slow = {"httpGet": {"path": "/readyz", "port": 8081}, "initialDelaySeconds": 5, "periodSeconds": 10,
            "failureThreshold": 6}
    container = manager(render({"readinessProbe": slow, "livenessProbe": None}))
    assert container["readinessProbe"] == slow
    assert "livenessProbe" not in container


@pytest.mark.parametrize(("flag", "tag"), [("image.tag=1", "1"), ("image.tag=2.5", "2.5"), ("image.tag=v2", "v2")])
def test_numeric_image_tags_render_as_written(render: Render, flag: str, tag: str) -> None:
    """`--set image.tag=1` makes a number; the image must still read `:1` (not `:%!s(int64=1)`), as in Go's chart."""
    objects = render(None, "--set", flag)
    container = manager(objects)
    assert container["image"] == f"docker.io/pko/pko:{tag}"
    assert env_of(container)["AGENT_IMAGE"] == f"docker.io/pko/pko:{tag}"
