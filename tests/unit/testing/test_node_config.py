"""The node's configuration files: every path the node writes stays under its work directory (so a teardown
knows what to remove), nothing can pull from a registry, and DNS never forwards off the machine."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import yaml

from pko.testing import cluster, nodeconfig

PATHS = nodeconfig.NodePaths(root=Path("/w/node"), containerd_root=Path("/cache/containerd"))


def test_containerd_keeps_its_state_in_known_places_and_clamps_oom_scores() -> None:
    config = tomllib.loads(nodeconfig.containerd_toml(PATHS, Path("/bin/containerd-shim-runc-v2")))
    assert config["version"] == 3  # containerd 2's own format: no migration at each start
    assert config["root"] == "/cache/containerd"
    # sockets live in a short state directory: a unix socket path may not exceed 104 bytes
    assert config["state"] == str(PATHS.containerd_state)
    assert len(f"{PATHS.containerd_socket}.ttrpc") <= 104
    assert config["grpc"]["address"] == str(PATHS.containerd_socket)
    # nothing of the host's containerd: no drop-in imports, no NRI socket under /run/nri
    assert config["imports"] == []
    assert "io.containerd.nri.v1.nri" in config["disabled_plugins"]
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    runc = runtime["containerd"]["runtimes"]["runc"]
    assert runc["runtime_path"] == "/bin/containerd-shim-runc-v2"  # the shim of the same build, not one on PATH
    assert runc["options"]["Root"].startswith(f"{PATHS.containerd_state}/")
    assert runtime["cni"]["conf_dir"].startswith("/w/node/")
    image_service = config["plugins"]["io.containerd.cri.v1.images"]
    assert image_service["pinned_images"]["sandbox"] == nodeconfig.PAUSE_IMAGE
    assert image_service["registry"]["config_path"] == str(PATHS.registry_hosts)


def test_every_registry_resolves_to_a_dead_loopback_port() -> None:
    hosts = tomllib.loads(nodeconfig.registry_hosts_toml("docker.io"))
    assert hosts["server"] == nodeconfig.DEAD_ENDPOINT
    assert nodeconfig.DEAD_ENDPOINT.startswith("http://127.0.0.1:")


def test_the_test_beds_own_registry_is_pulled_from_over_plain_http() -> None:
    hosts = tomllib.loads(nodeconfig.plain_http_hosts_toml("127.0.0.1:5000"))
    assert hosts["server"] == "http://127.0.0.1:5000"
    assert hosts["host"]["http://127.0.0.1:5000"]["capabilities"] == ["pull", "resolve"]


def test_cni_and_kubelet_write_under_the_work_dir() -> None:
    cni = json.loads(nodeconfig.cni_conflist(PATHS, "pko-cni0", "10.88.0.0/16"))
    assert cni["plugins"][0]["bridge"] == "pko-cni0"
    assert cni["plugins"][0]["ipam"]["dataDir"].startswith("/w/node/")
    kubelet = yaml.safe_load(nodeconfig.kubelet_config(PATHS, "10.96.0.10"))
    assert kubelet["clusterDNS"] == ["10.96.0.10"]
    assert kubelet["podLogsDir"].startswith("/w/node/")
    assert kubelet["staticPodPath"].startswith("/w/node/")
    assert kubelet["imageGCHighThresholdPercent"] == 100  # nothing here can be pulled again
    assert kubelet["featureGates"] == {"ImageVolume": True}


def test_coredns_answers_cluster_local_only() -> None:
    objects = nodeconfig.coredns_objects("10.96.0.10")
    corefile = next(o for o in objects if o["kind"] == "ConfigMap")["data"]["Corefile"]
    assert "kubernetes cluster.local" in corefile
    assert "forward" not in corefile
    service = next(o for o in objects if o["kind"] == "Service")
    assert service["spec"]["clusterIP"] == "10.96.0.10"
    container = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["imagePullPolicy"] == "Never"


def test_the_default_storage_class_provisions_under_the_work_dir_with_a_local_helper_image() -> None:
    config = json.loads(nodeconfig.local_path_config(PATHS))
    assert config["nodePathMap"] == [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/w/node/local-path"]}]
    helper = yaml.safe_load(nodeconfig.local_path_helper_pod("docker.io/library/python:3.11-slim-bookworm"))
    container = helper["spec"]["containers"][0]
    assert container["imagePullPolicy"] == "Never"  # nothing on the node can be pulled
    assert container["image"] == "docker.io/library/python:3.11-slim-bookworm"
    objects = {o["kind"]: o for o in nodeconfig.storage_objects()}
    storage_class = objects["StorageClass"]
    assert storage_class["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert storage_class["provisioner"] == nodeconfig.STORAGE_PROVISIONER
    assert storage_class["volumeBindingMode"] == "WaitForFirstConsumer"
    assert set(objects["ConfigMap"]["data"]) == {"setup", "teardown"}
    assert all(o["metadata"].get("namespace") == nodeconfig.STORAGE_NAMESPACE
               for o in nodeconfig.storage_objects() if o["kind"] in ("ConfigMap", "ServiceAccount"))


def test_image_keys_from_ctr_listing() -> None:
    listing = (
        "REF TYPE DIGEST SIZE PLATFORMS LABELS\n"
        "docker.io/pko/pko:dev application/vnd.oci.image.manifest.v1+json sha256:ab 120.5 MiB linux/amd64 "
        "io.cri-containerd.image=managed,pko.test/key=k1\n"
        "registry.k8s.io/pause:3.10.1 application/vnd.oci.image.manifest.v1+json sha256:cd 300.0 KiB linux/amd64 -\n"
    )
    assert cluster._image_keys(listing) == {"docker.io/pko/pko:dev": "k1", "registry.k8s.io/pause:3.10.1": ""}


def test_a_work_directory_too_long_for_the_kubelets_sockets_is_refused_before_anything_starts() -> None:
    short = nodeconfig.NodePaths(root=Path("/tmp/pko-dev-x/real-cluster/node"), containerd_root=Path("/c"))
    assert short.socket_problem() is None
    deep_root = Path("/tmp/pytest-of-root/pytest-121/test_pko_dev_pod_once0/dev/real-cluster/node")
    deep = nodeconfig.NodePaths(root=deep_root, containerd_root=Path("/c"))
    problem = deep.socket_problem()
    assert problem is not None
    assert "unix socket" in problem
    assert "pod-resources" in problem
