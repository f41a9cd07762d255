"""The configuration files of the test cluster's node, rendered from one place: containerd, the CNI bridge,
kubelet, kube-proxy, the CoreDNS objects, and the default StorageClass with its provisioner's configuration.

Everything a node component writes lives under the cluster's work directory (containerd's root and state, the
runc root, kubelet's root and pod logs, CNI's IPAM data), so a teardown knows exactly what to remove. The choices
that make a node work on our machines are commented where they are made; they come from a verified recipe
(`shared/reference/real-cluster`). Pure functions: paths and addresses in, text or objects out.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

NODE_NAME = "pko-node"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.1"
COREDNS_IMAGE = "docker.io/pko-test/coredns:1.13.1"
#: Registries an image reference could name. containerd is pointed at a dead local endpoint for each, so a test that
#: forgets `imagePullPolicy` fails with ErrImagePull at once instead of sending a packet off the machine.
BLOCKED_REGISTRIES = ("docker.io", "registry.k8s.io", "ghcr.io", "quay.io", "gcr.io", "public.ecr.aws")
DEAD_ENDPOINT = "http://127.0.0.1:9"
UNIX_SOCKET_MAX = 107  # sun_path is 108 bytes, with the terminating NUL
#: Beta features, off by default in Kubernetes 1.34, that the node turns on in the API server and the kubelet alike:
#: `image` volumes (an OCI image mounted read-only into a pod; the `restricted` profile allows them), which need
#: containerd 2.1 or later — the node runs the containerd `make tools` builds (:data:`CONTAINERD_BINARIES`).
FEATURE_GATES = ("ImageVolume",)


@dataclass(frozen=True)
class NodePaths:
    """Where the node keeps its state: `root` (configs, kubelet, CNI, logs), `containerd_root` (the image store,
    which may outlive a run) and `containerd_state` (sockets and container bundles: a short path, because a unix
    socket path may not exceed 104 bytes, which a test's work directory easily does)."""

    root: Path
    containerd_root: Path
    containerd_state: Path = Path("/run/pko-node")

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_state / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd.toml"

    @property
    def registry_hosts(self) -> Path:
        return self.root / "registry-hosts"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    def socket_problem(self) -> str | None:
        """Why the kubelet could not start under this root, if it could not: it binds unix sockets under its root
        directory (the longest is ``pod-resources/<10 digits>``), and a unix socket path is limited to 108 bytes
        with the terminating NUL. The kubelet then exits with "bind: invalid argument"; say it before."""
        longest = self.kubelet_root / "pod-resources" / ("9" * 10)
        if len(os.fsencode(longest)) <= UNIX_SOCKET_MAX:
            return None
        return (f"the node's directory {self.root} is too long: the kubelet's sockets under it "
                f"({longest}) would exceed the {UNIX_SOCKET_MAX}-byte limit of a unix socket path; use a shorter "
                "work directory")

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet-config.yaml"

    @property
    def kube_proxy_config(self) -> Path:
        return self.root / "kube-proxy-config.yaml"

    @property
    def local_volumes(self) -> Path:
        """Where local-path-provisioner makes a directory for each PersistentVolume it provisions."""
        return self.root / "local-path"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"


def containerd_toml(paths: NodePaths, shim: Path) -> str:
    """containerd 2's configuration (version 3): own root/state/socket, the local pause image, CNI from Debian,
    Debian's runc behind the runc shim `make tools` builds (`shim`), and nothing read from or written to the host's
    own containerd paths (no `/etc/containerd/conf.d` imports; NRI, which would listen on `/run/nri`, is off)."""
    state = paths.containerd_state
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    images = "plugins.'io.containerd.cri.v1.images'"
    return f"""version = 3
root = '{paths.containerd_root}'
state = '{state}'
imports = []
disabled_plugins = ['io.containerd.nri.v1.nri']

[grpc]
  address = '{paths.containerd_socket}'

[plugins.'io.containerd.internal.v1.opt']
  path = '{paths.root / 'containerd-opt'}'

[{images}]
  snapshotter = 'overlayfs'
  [{images}.pinned_images]
    sandbox = '{PAUSE_IMAGE}'
  [{images}.registry]
    config_path = '{paths.registry_hosts}'

[{runtime}]
  enable_unprivileged_ports = false
  # Our machines lack CAP_SYS_RESOURCE: a negative oom_score_adj (pause asks for -998) makes runc fail with
  # "can't get final child's PID from pipe: EOF". Clamp scores to containerd's own instead.
  restrict_oom_score_adj = true
  [{runtime}.containerd]
    default_runtime_name = 'runc'
    [{runtime}.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      runtime_path = '{shim}'
      [{runtime}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = '/usr/sbin/runc'
        Root = '{state / 'runc'}'
  [{runtime}.cni]
    bin_dirs = ['/usr/lib/cni']
    conf_dir = '{paths.cni_conf_dir}'
"""


def registry_hosts_toml(registry: str) -> str:
    """A `hosts.toml` that sends every pull from `registry` to a dead loopback port (see BLOCKED_REGISTRIES)."""
    return _hosts_toml(DEAD_ENDPOINT)


def plain_http_hosts_toml(address: str) -> str:
    """A `hosts.toml` for a registry of the test bed at `address` (``host:port``, loopback), which speaks plain
    HTTP: containerd would otherwise try HTTPS first."""
    return _hosts_toml(f"http://{address}")


def _hosts_toml(endpoint: str) -> str:
    return f'server = "{endpoint}"\n\n[host."{endpoint}"]\n  capabilities = ["pull", "resolve"]\n'


def cni_conflist(paths: NodePaths, bridge: str, pod_cidr: str) -> str:
    """The bridge + host-local network every pod joins (Debian's containernetworking-plugins)."""
    return json.dumps({
        "cniVersion": "0.4.0",
        "name": "pko",
        "plugins": [
            {
                "type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": True, "hairpinMode": True,
                "ipam": {
                    "type": "host-local", "ranges": [[{"subnet": pod_cidr}]], "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(paths.cni_ipam_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }, indent=2)


def kubelet_config(paths: NodePaths, cluster_dns: str) -> str:
    """KubeletConfiguration: cgroupfs, our containerd, no image GC (nothing here can be pulled again)."""
    config: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        # The API server reaches the kubelet for logs and exec; on a single test node anonymous access is fine.
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "address": "0.0.0.0",
        "port": 10250,
        "readOnlyPort": 0,
        "healthzPort": 10248,
        "healthzBindAddress": "127.0.0.1",
        "staticPodPath": str(paths.kubelet_root / "manifests"),
        "clusterDomain": "cluster.local",
        "clusterDNS": [cluster_dns],
        "resolvConf": "/etc/resolv.conf",
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "imageMinimumGCAge": "8760h",
        "serializeImagePulls": False,
        "protectKernelDefaults": False,
        "makeIPTablesUtilChains": True,
        "registerNode": True,
        "nodeStatusReportFrequency": "10s",
        "nodeStatusUpdateFrequency": "10s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "5s",
        "podLogsDir": str(paths.pod_logs),
        "shutdownGracePeriod": "0s",
        "featureGates": dict.fromkeys(FEATURE_GATES, True),
    }
    return yaml.safe_dump(config, sort_keys=False)


def kube_proxy_config(kubeconfig: Path, pod_cidr: str) -> str:
    """KubeProxyConfiguration: iptables mode, and no conntrack sysctl changes (the machine's are not ours)."""
    config: dict[str, Any] = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clusterCIDR": pod_cidr,
        "hostnameOverride": NODE_NAME,
        "bindAddress": "0.0.0.0",
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "conntrack": {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"syncPeriod": "30s", "minSyncPeriod": "0s"},
    }
    return yaml.safe_dump(config, sort_keys=False)


COREFILE = """.:53 {
    errors
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 5
    }
    cache 5
    loop
    reload
}
"""


def coredns_objects(cluster_dns: str) -> list[dict[str, Any]]:
    """CoreDNS for `cluster.local` only: no `forward`, so no name a pod asks for ever leaves this machine."""
    meta = {"namespace": "kube-system"}
    labels = {"k8s-app": "kube-dns"}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", **meta}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "system:coredns"},
         "rules": [
             {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
              "verbs": ["list", "watch"]},
             {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "system:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", **meta},
         "data": {"Corefile": COREFILE}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "coredns", "labels": labels, **meta},
         "spec": {
             "replicas": 1,
             "selector": {"matchLabels": labels},
             "template": {"metadata": {"labels": labels}, "spec": {
                 "serviceAccountName": "coredns",
                 "dnsPolicy": "Default",
                 "priorityClassName": "system-cluster-critical",
                 "containers": [{
                     "name": "coredns", "image": COREDNS_IMAGE, "imagePullPolicy": "Never",
                     "args": ["-conf", "/etc/coredns/Corefile"],
                     "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
                     "ports": [{"containerPort": 53, "name": "dns", "protocol": "UDP"},
                               {"containerPort": 53, "name": "dns-tcp", "protocol": "TCP"}],
                     "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 1},
                     "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}},
                     "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
                 }],
                 "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
             }},
         }},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kube-dns", "labels": labels, **meta},
         "spec": {"clusterIP": cluster_dns, "selector": labels,
                  "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                            {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}},
    ]


# --- the default StorageClass ---------------------------------------------------------------------------------------
# local-path-provisioner, as kind ships it: a PVC of the class binds, once its pod is scheduled, to a new directory on
# the node that a helper pod makes (and removes when the volume is released). The provisioner runs beside the node's
# other daemons with the admin kubeconfig; its helper pods run in their own namespace.
STORAGE_CLASS = "standard"  # kind's name for its default class
STORAGE_PROVISIONER = "rancher.io/local-path"
STORAGE_NAMESPACE = "local-path-storage"
STORAGE_CONFIGMAP = "local-path-config"
STORAGE_HELPER_ACCOUNT = "local-path-provisioner-helper"


def local_path_config(paths: NodePaths) -> str:
    """The provisioner's config.json: every node keeps its volumes under the cluster's work directory."""
    return json.dumps({"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                                        "paths": [str(paths.local_volumes)]}]}) + "\n"


def local_path_helper_pod(image: str) -> str:
    """The helper pod template (JSON is YAML): a local image with a shell, never pulled, root so that it can make and
    remove directories in the root-owned volume directory."""
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "helper-pod"}, "spec": {
        "containers": [{"name": "helper-pod", "image": image, "imagePullPolicy": "Never",
                        "securityContext": {"runAsUser": 0, "runAsGroup": 0}}],
    }}) + "\n"


def storage_objects() -> list[dict[str, Any]]:
    """The provisioner's namespace, its helper pods' account and scripts, and the default StorageClass."""
    meta = {"namespace": STORAGE_NAMESPACE}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": STORAGE_NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": STORAGE_HELPER_ACCOUNT, **meta},
         "automountServiceAccountToken": False},
        # the helper pod runs `setup` for a new volume, `teardown` for a released one ($VOL_DIR is its directory)
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": STORAGE_CONFIGMAP, **meta}, "data": {
            "setup": '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n',
            "teardown": '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n',
        }},
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
         "metadata": {"name": STORAGE_CLASS,
                      "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
         "provisioner": STORAGE_PROVISIONER, "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Delete"},
    ]
