"""The workspace StatefulSet and Service are pinned field by field: they are part of the compatibility contract."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pko.api import workspace as ws_api
from pko.controllers.workspace import manifests

AGENT = manifests.AgentImage("example.com/pko:1.2.3", "Always")


def _workspace(spec: dict[str, Any], generation: int = 3) -> ws_api.Workspace:
    return ws_api.Workspace.model_validate(
        {"metadata": {"name": "my-stack", "namespace": "team", "generation": generation}, "spec": spec}
    )


def _by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in items}


def test_git_source_restricted_statefulset_is_pinned() -> None:
    ws = _workspace({
        "git": {"url": "https://git.example/repo.git", "ref": "abc123", "dir": "infra", "shallow": True,
                "auth": {"token": {"name": "git-creds", "key": "token"}}},
        "stacks": [{"name": "dev"}],
    })
    sts = manifests.statefulset(ws, AGENT)

    assert sts["metadata"] == {
        "name": "my-stack-workspace", "namespace": "team",
        "labels": {"auto.pulumi.com/component": "workspace", "auto.pulumi.com/workspace-name": "my-stack"},
    }
    spec = sts["spec"]
    assert spec["replicas"] == 1
    assert spec["serviceName"] == "my-stack-workspace"
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["selector"]["matchLabels"] == sts["metadata"]["labels"]
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "default"
    assert pod["terminationGracePeriodSeconds"] == 600
    assert pod["securityContext"] == {
        "seccompProfile": {"type": "RuntimeDefault"}, "runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
    }
    assert pod["volumes"] == [{"name": "share", "emptyDir": {}}]
    assert [c["name"] for c in pod["initContainers"]] == ["bootstrap", "fetch"]
    bootstrap, fetch = pod["initContainers"]
    assert bootstrap["image"] == "example.com/pko:1.2.3"
    assert bootstrap["imagePullPolicy"] == "Always"
    assert bootstrap["args"] == ["cp", "/agent", "/tini", "/share/"]
    assert fetch["args"][:2] == ["sh", "-c"]
    assert '--git-url "$GIT_URL" --git-revision "$GIT_REVISION"' in fetch["args"][2]
    assert 'ln -s "/share/source/$GIT_DIR" /share/workspace' in fetch["args"][2]
    assert fetch["env"] == [
        {"name": "GIT_URL", "value": "https://git.example/repo.git"},
        {"name": "GIT_REVISION", "value": "abc123"},
        {"name": "GIT_DIR", "value": "infra"},
        {"name": "GIT_SHALLOW", "value": "true"},
        {"name": "GIT_TOKEN", "valueFrom": {"secretKeyRef": {"name": "git-creds", "key": "token"}}},
        {"name": "PULUMI_ENV", "value": "/share/.env"},
    ]
    (pulumi,) = pod["containers"]
    assert pulumi["name"] == "pulumi"
    assert pulumi["image"] == "pulumi/pulumi:latest-nonroot"
    assert pulumi["workingDir"] == "/share/workspace"
    assert pulumi["ports"] == [{"name": "grpc", "containerPort": 50051}]
    assert pulumi["resources"] == {"requests": {"cpu": "100m", "memory": "64Mi"}}
    assert pulumi["command"] == [
        "/share/tini", "/share/agent", "--", "serve", "--workspace", "/share/workspace", "--skip-install",
        "--env-file", "/share/.env", "--auth-mode", "kube", "--kube-audience", "my-stack.team",
        "--kube-workspace-namespace", "team", "--kube-workspace-name", "my-stack",
    ]
    assert [e["name"] for e in pulumi["env"]] == ["POD_NAMESPACE", "POD_SA_NAME", "AGENT_MEMLIMIT", "PULUMI_ENV"]
    for container in [*pod["initContainers"], *pod["containers"]]:
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
        }
        assert container["volumeMounts"] == [{"name": "share", "mountPath": "/share"}]
    assert not {"livenessProbe", "readinessProbe", "startupProbe"} & pulumi.keys()


@pytest.mark.parametrize(
    ("source", "script_part", "env"),
    [
        ({"flux": {"url": "http://src/a.tgz", "digest": "sha256:00", "dir": "p"}},
         '--flux-url "$FLUX_URL" --flux-digest "$FLUX_DIGEST"',
         {"FLUX_URL": "http://src/a.tgz", "FLUX_DIGEST": "sha256:00", "FLUX_DIR": "p"}),
        ({"local": {"dir": "/home/app"}}, 'ln -s "$LOCAL_DIR" /share/workspace', {"LOCAL_DIR": "/home/app"}),
        ({"projectInfo": {"name": "proj", "runtime": "yaml"}},
         '--project-name "$PROJECT_NAME" --project-runtime "$PROJECT_RUNTIME"',
         {"PROJECT_NAME": "proj", "PROJECT_RUNTIME": "yaml"}),
    ],
)
def test_fetch_container_per_source(source: dict[str, Any], script_part: str, env: dict[str, str]) -> None:
    pod = manifests.statefulset(_workspace(source), AGENT)["spec"]["template"]["spec"]
    fetch = _by_name(pod["initContainers"])["fetch"]
    assert script_part in fetch["args"][2]
    assert {e["name"]: e["value"] for e in fetch["env"] if e["name"] != "PULUMI_ENV"} == env


def test_flux_untar_limit_is_passed_to_fetch() -> None:
    ws = _workspace({"flux": {"url": "u", "digest": "d"}})
    pod = manifests.statefulset(ws, AGENT, flux_max_untar="2048")["spec"]["template"]["spec"]
    assert {"name": "FLUX_MAX_UNTAR_SIZE_BYTES", "value": "2048"} in _by_name(pod["initContainers"])["fetch"]["env"]


def test_a_github_enterprise_api_reaches_the_fetch_of_a_github_app_workspace_only() -> None:
    def ref(key: str) -> dict[str, str]:
        return {"name": "app", "key": key}

    app = _workspace({"git": {"url": "https://ghe.example.com/o/r.git", "ref": "abc", "auth": {"githubApp": {
        "appID": ref("id"), "installationID": ref("installation"), "privateKey": ref("key")}}}})
    token = _workspace({"git": {"url": "https://ghe.example.com/o/r.git", "ref": "abc",
                                "auth": {"token": ref("token")}}})

    def fetch_env(ws: ws_api.Workspace, url: str | None) -> dict[str, Any]:
        pod = manifests.statefulset(ws, AGENT, github_api_url=url)["spec"]["template"]["spec"]
        return {e["name"]: e.get("value") for e in _by_name(pod["initContainers"])["fetch"]["env"]}

    assert fetch_env(app, "https://ghe.example.com/api/v3")["GIT_GITHUB_APP_API_URL"] == (
        "https://ghe.example.com/api/v3")
    assert "GIT_GITHUB_APP_API_URL" not in fetch_env(app, None)  # github.com's: the pod is what it was
    assert "GIT_GITHUB_APP_API_URL" not in fetch_env(token, "https://ghe.example.com/api/v3")


def test_no_source_means_bootstrap_only() -> None:
    pod = manifests.statefulset(_workspace({}), AGENT)["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["bootstrap"]


def test_baseline_profile_only_sets_seccomp() -> None:
    pod = manifests.statefulset(_workspace({"securityProfile": "baseline"}), AGENT)["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert all("securityContext" not in c for c in [*pod["initContainers"], *pod["containers"]])
    assert pod["containers"][0]["image"] == "pulumi/pulumi:latest"


def test_other_profiles_run_as_baseline_without_a_default_image() -> None:
    """The Go operator's CRD takes any profile string: only "restricted" restricts the pod, and the Go defaulter
    picks an image for "restricted" and "baseline" only (so the user must name one)."""
    pod = manifests.statefulset(_workspace({"securityProfile": "Restricted", "image": "my/pulumi:3"}),
                                AGENT)["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["containers"][0]["image"] == "my/pulumi:3"
    assert manifests.with_defaults(_workspace({"securityProfile": "privileged"})).image is None


def test_user_settings_reach_the_pulumi_container() -> None:
    ws = _workspace({
        "image": "my/pulumi:3", "imagePullPolicy": "Never", "serviceAccountName": "deployer",
        "pulumiLogLevel": 7, "env": [{"name": "A", "value": "1"}],
        "envFrom": [{"secretRef": {"name": "creds"}}],
        "resources": {"limits": {"memory": "1Gi"}},
    })
    pod = manifests.statefulset(ws, AGENT)["spec"]["template"]["spec"]
    pulumi = pod["containers"][0]
    assert pod["serviceAccountName"] == "deployer"
    assert pulumi["image"] == "my/pulumi:3"
    assert pulumi["imagePullPolicy"] == "Never"
    assert pulumi["command"][-2:] == ["--pulumi-log-level", "7"]
    assert pulumi["env"][0] == {"name": "A", "value": "1"}
    assert pulumi["envFrom"] == [{"secretRef": {"name": "creds"}}]
    assert pulumi["resources"] == {"limits": {"memory": "1Gi"}}


def test_pod_template_is_strategically_merged() -> None:
    ws = _workspace({
        "git": {"url": "u", "ref": "r"},
        "podTemplate": {
            "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
            "spec": {
                "initContainers": [{"name": "extra", "image": "busybox"}],
                "containers": [{"name": "pulumi", "image": "custom:1",
                                "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]}],
                "volumes": [{"name": "cache", "emptyDir": {}}],
                "tolerations": [{"key": "k", "operator": "Exists"}],
            },
        },
    })
    template = manifests.statefulset(ws, AGENT)["spec"]["template"]
    pod = template["spec"]
    assert template["metadata"]["labels"]["team"] == "a"
    assert template["metadata"]["labels"]["auto.pulumi.com/workspace-name"] == "my-stack"
    assert "auto.pulumi.com/revision-hash" in template["metadata"]["annotations"]
    assert [c["name"] for c in pod["initContainers"]] == ["bootstrap", "fetch", "extra"]
    pulumi = pod["containers"][0]
    assert pulumi["image"] == "custom:1"
    assert pulumi["command"][1] == "/share/agent"
    assert [m["name"] for m in pulumi["volumeMounts"]] == ["share", "cache"]
    assert [v["name"] for v in pod["volumes"]] == ["share", "cache"]
    assert pod["tolerations"] == [{"key": "k", "operator": "Exists"}]
    # PULUMI_ENV goes to every container, the user's included, after the merge.
    extra = _by_name(pod["initContainers"])["extra"]
    assert extra["env"] == [{"name": "PULUMI_ENV", "value": "/share/.env"}]


def test_revision_hash_follows_generation_and_source() -> None:
    base = manifests.revision_hash(_workspace({"git": {"url": "u", "ref": "a"}}, generation=1))
    assert base == manifests.revision_hash(_workspace({"git": {"url": "u", "ref": "a"}}, generation=1))
    assert base != manifests.revision_hash(_workspace({"git": {"url": "u", "ref": "a"}}, generation=2))
    assert base != manifests.revision_hash(_workspace({"git": {"url": "u", "ref": "b"}}, generation=1))


def test_service_is_headless_and_system_labels_win() -> None:
    ws = _workspace({"serviceTemplate": {"metadata": {
        "labels": {"auto.pulumi.com/workspace-name": "spoofed", "team": "a"}, "annotations": {"x": "y"}}}})
    svc = manifests.service(ws)
    assert svc["metadata"]["name"] == "my-stack-workspace"
    assert svc["metadata"]["labels"] == {
        "team": "a", "auto.pulumi.com/component": "workspace", "auto.pulumi.com/workspace-name": "my-stack",
    }
    assert svc["metadata"]["annotations"] == {"x": "y"}
    assert svc["spec"] == {
        "clusterIP": "None",
        "selector": {"auto.pulumi.com/component": "workspace", "auto.pulumi.com/workspace-name": "my-stack"},
        "ports": [{"name": "grpc", "port": 50051}],
    }
    assert manifests.service_address(ws) == "my-stack-workspace.team:50051"


@pytest.mark.parametrize("kept", [None, manifests.ShareVolume("1Gi")])
@pytest.mark.parametrize("source", [
    {"git": {"url": "https://git.example/repo.git", "ref": "abc123"}},
    {"flux": {"url": "http://src/a.tgz", "digest": "sha256:00"}},
    {"projectInfo": {"name": "proj", "runtime": "yaml"}},
])
def test_an_agent_from_an_image_volume_is_run_in_place_without_a_bootstrap_copy(
        source: dict[str, Any], kept: manifests.ShareVolume | None) -> None:
    """--workspace-agent-image-volume: the pulumi container mounts the agent image read-only and runs agent and tini
    from it; fetch runs the image's own /agent; nothing copies them into /share."""
    agent = manifests.AgentImage("example.com/pko:1.2.3", "Always", volume=True)
    pod = manifests.statefulset(_workspace(source), agent, volume=kept)["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["fetch"]
    (fetch,) = pod["initContainers"]
    assert fetch["image"] == "example.com/pko:1.2.3"
    assert re.search(r"(?m)^/agent init -t /share/", fetch["args"][2]), fetch["args"][2]  # the image's own
    assert pod["volumes"][-1] == {"name": "pko-agent",
                                  "image": {"reference": "example.com/pko:1.2.3", "pullPolicy": "Always"}}
    assert [v["name"] for v in pod["volumes"]] == (["pko-agent"] if kept else ["share", "pko-agent"])
    (pulumi,) = pod["containers"]
    assert pulumi["command"][:4] == ["/pko-agent/tini", "/pko-agent/agent", "--", "serve"]
    assert pulumi["volumeMounts"] == [{"name": "share", "mountPath": "/share"},
                                      {"name": "pko-agent", "mountPath": "/pko-agent", "readOnly": True}]
    assert fetch["volumeMounts"] == [{"name": "share", "mountPath": "/share"}]  # fetch needs only its own image


def test_an_agent_from_an_image_volume_ignores_a_pod_template_patch_of_the_bootstrap_container() -> None:
    """A namespace's quota makes users give `bootstrap` resources in the podTemplate; with no bootstrap container
    that patch would add one without an image (an invalid StatefulSet): it is left out, the rest merges."""
    ws = _workspace({
        **GIT_SPEC, "securityProfile": "restricted",
        "podTemplate": {"spec": {"initContainers": [
            {"name": "bootstrap", "resources": {"limits": {"cpu": "100m"}}},
            {"name": "fetch", "resources": {"limits": {"cpu": "200m"}}},
            {"name": "extra", "image": "busybox"}]}},
    })
    agent = manifests.AgentImage("example.com/pko:1.2.3", volume=True)
    pod = manifests.statefulset(ws, agent)["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["fetch", "extra"]
    assert _by_name(pod["initContainers"])["fetch"]["resources"] == {"limits": {"cpu": "200m"}}
    for container in [*pod["initContainers"][:1], *pod["containers"]]:  # the system's, restricted
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
    with_copy = manifests.statefulset(ws, AGENT)["spec"]["template"]["spec"]
    assert _by_name(with_copy["initContainers"])["bootstrap"]["resources"] == {"limits": {"cpu": "100m"}}


def test_a_kept_share_loses_the_agent_earlier_pods_copied_once_the_agent_comes_from_the_image(
        tmp_path: Path) -> None:
    share = tmp_path / "share"
    (share / ".pko-agent-abc").mkdir(parents=True)
    (share / "agent").write_text("old launcher")
    (share / "tini").write_text("old tini")
    (share / ".npm").mkdir()  # a cache the share keeps
    agent = manifests.AgentImage("example.com/pko:1.2.3", volume=True)
    _run_fetch_prefix(GIT_SPEC, share, agent)
    assert sorted(p.name for p in share.iterdir()) == [".kept", ".npm", "source", "workspace"]
    without = manifests.statefulset(_workspace(GIT_SPEC), AGENT, volume=manifests.ShareVolume("1Gi"))
    assert "/share/.pko-agent-" not in without["spec"]["template"]["spec"]["initContainers"][1]["args"][2]


def test_without_an_agent_image_volume_the_pod_copies_the_agent_as_the_go_operator() -> None:
    pod = manifests.statefulset(_workspace(GIT_SPEC), AGENT)["spec"]["template"]["spec"]
    fetch = _by_name(pod["initContainers"])["fetch"]
    assert "/share/agent init -t /share/source" in fetch["args"][2]
    assert "pko-agent" not in {v["name"] for v in pod["volumes"]}
    assert pod["containers"][0]["command"][:2] == ["/share/tini", "/share/agent"]


def test_agent_image_settings() -> None:
    assert manifests.AgentImage.from_settings(None, None, "v0.1.0") == manifests.AgentImage(
        "docker.io/pko/pko:v0.1.0", "IfNotPresent")
    assert manifests.AgentImage.from_settings("x/y:z", "always", "v").pull_policy == "Always"
    assert manifests.AgentImage.from_settings("x/y:z", "bogus", "v").pull_policy == "IfNotPresent"
    assert manifests.AgentImage.from_settings("x/y:z", None, "v", volume=True).volume
    assert not manifests.AgentImage.from_settings("x/y:z", None, "v").volume


def test_the_operators_default_env_fills_in_only_what_the_workspace_does_not_set() -> None:
    ws = _workspace({"local": {"dir": "/src"}, "stacks": [{"name": "dev"}],
                     "env": [{"name": "NPM_CONFIG_REGISTRY", "value": "https://mine.example/npm/"}]})
    cache = {"NPM_CONFIG_REGISTRY": "http://pko:80/cache/npm/", "GOPROXY": "http://pko:80/cache/go"}
    env = manifests.statefulset(ws, AGENT, default_env=cache)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e for e in env if e["name"] in cache] == [
        {"name": "NPM_CONFIG_REGISTRY", "value": "https://mine.example/npm/"},  # the workspace's own wins
        {"name": "GOPROXY", "value": "http://pko:80/cache/go"},
    ]
    without = manifests.statefulset(ws, AGENT)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert "GOPROXY" not in {e["name"] for e in without}  # no cache: the pod is the Go operator's


def test_a_sharded_workspace_s_statefulset_carries_the_shard_label_but_not_in_its_selector_or_pods() -> None:
    """The operator of shard b watches only StatefulSets labelled for shard b; the label goes on the StatefulSet's
    metadata alone, so relabelling it on a shard move changes neither its immutable selector nor its pod."""
    ws = _workspace({"stacks": [{"name": "dev"}]})
    plain = manifests.statefulset(ws, AGENT)
    sts = manifests.statefulset(ws, AGENT, carried={"sharding.fluxcd.io/key": "b"})
    assert sts["metadata"]["labels"] == {**plain["metadata"]["labels"], "sharding.fluxcd.io/key": "b"}
    assert sts["spec"]["selector"] == plain["spec"]["selector"]
    assert sts["spec"]["template"] == plain["spec"]["template"]
    # a carried label never replaces the component labels the Service and pods are selected by
    clash = manifests.statefulset(ws, AGENT, carried={"auto.pulumi.com/component": "other"})
    assert clash["metadata"]["labels"] == plain["metadata"]["labels"]


# --- pko: a kept /share (ShareVolume) --------------------------------------------------------------------------------

GIT_SPEC = {"git": {"url": "https://git.example/repo.git", "ref": "abc123", "dir": "infra"},
            "stacks": [{"name": "dev"}]}


def test_a_kept_share_is_a_claim_of_the_statefulset_kept_while_it_sleeps() -> None:
    sts = manifests.statefulset(_workspace(GIT_SPEC), AGENT, replicas=0,
                                volume=manifests.ShareVolume("2Gi", "fast"))
    spec = sts["spec"]
    assert spec["volumeClaimTemplates"] == [{"metadata": {"name": "share"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}, "storageClassName": "fast"}}]
    # scale-to-zero keeps the claim; deleting the workspace (its StatefulSet) deletes it
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Delete", "whenScaled": "Retain"}
    pod = spec["template"]["spec"]
    assert pod["volumes"] == []  # no emptyDir of the same name
    assert all(m == {"name": "share", "mountPath": "/share"}
               for c in [*pod["initContainers"], *pod["containers"]] for m in c["volumeMounts"])
    assert pod["securityContext"]["fsGroup"] == 1000
    assert pod["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert "PULUMI_HOME" not in env  # the agent links only the plugins onto the claim; credentials stay off it
    assert env["PKO_KEPT_DIR"] == manifests.KEPT_DIR
    assert env["XDG_CACHE_HOME"] == "/share/.cache"


def test_without_a_kept_share_nothing_changes() -> None:
    sts = manifests.statefulset(_workspace(GIT_SPEC), AGENT)
    assert "volumeClaimTemplates" not in sts["spec"]
    pod = sts["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "share", "emptyDir": {}}]
    assert "fsGroup" not in pod["securityContext"]
    assert not {"XDG_CACHE_HOME", "PKO_KEPT_DIR"} & {e["name"] for e in pod["containers"][0]["env"]}
    assert "kept" not in pod["initContainers"][1]["args"][2]


def test_a_workspaces_own_share_volume_wins_over_the_operators_and_size_0_opts_out() -> None:
    default = manifests.ShareVolume("1Gi", "standard")
    own = _workspace({**GIT_SPEC, "shareVolume": {"size": "5Gi"}})
    claim = manifests.statefulset(own, AGENT, volume=default)["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert claim["spec"]["storageClassName"] == "standard"  # the operator's class when it names none
    out = _workspace({**GIT_SPEC, "shareVolume": {"size": "0"}})
    assert "volumeClaimTemplates" not in manifests.statefulset(out, AGENT, volume=default)["spec"]
    alone = _workspace({**GIT_SPEC, "shareVolume": {"size": "3Gi", "storageClassName": "local-path"}})
    claim = manifests.statefulset(alone, AGENT)["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["storageClassName"] == "local-path"


def test_the_workspaces_own_env_wins_over_the_kept_locations() -> None:
    ws = _workspace({**GIT_SPEC, "env": [{"name": "XDG_CACHE_HOME", "value": "/elsewhere"}]})
    env = manifests.statefulset(ws, AGENT, volume=manifests.ShareVolume("1Gi"))["spec"]["template"]["spec"][
        "containers"][0]["env"]
    assert [e["value"] for e in env if e["name"] == "XDG_CACHE_HOME"] == ["/elsewhere"]


def _run_fetch_prefix(spec: dict[str, Any], share: Path, agent: manifests.AgentImage = AGENT) -> None:
    """Run the fetch container's script with `share` for /share, the agent's `init` replaced by making the checkout
    it would make (a folder with a new package.json)."""
    init = manifests.statefulset(_workspace(spec), agent, volume=manifests.ShareVolume("1Gi"))["spec"][
        "template"]["spec"]["initContainers"]
    script = _by_name(init)["fetch"]["args"][2]
    script = script.replace(f"{agent.in_fetch} init -t /share/source", "fake_init /share/source")
    script = script.replace("/share", str(share))
    fake_init = 'fake_init() { mkdir -p "$1/$GIT_DIR" && echo new > "$1/$GIT_DIR/package.json"; }\n'
    subprocess.run(["sh", "-c", fake_init + script], check=True,
                   env={"PATH": os.environ["PATH"], "GIT_DIR": "infra", "GIT_URL": "u", "GIT_REVISION": "r"})


def test_a_new_pods_fetch_sets_the_last_node_modules_aside_and_clears_the_last_source(tmp_path: Path) -> None:
    share = tmp_path / "share"
    checkout = share / "source" / "infra"
    (checkout / "node_modules" / "left-pad").mkdir(parents=True)
    (checkout / "node_modules" / "left-pad" / "index.js").write_text("module.exports = 1\n")
    (checkout / "old.ts").write_text("old\n")
    (share / "workspace").symlink_to(checkout)
    (share / ".kept" / "node_modules").mkdir(parents=True)  # an older tree set aside before: replaced
    (share / ".kept" / "node_modules" / "stale").write_text("")

    _run_fetch_prefix(GIT_SPEC, share)

    kept = share / ".kept" / "node_modules"
    assert (kept / "left-pad" / "index.js").read_text() == "module.exports = 1\n"
    assert not (kept / "stale").exists()
    assert not (checkout / "old.ts").exists()  # the last source is gone, the new one is there
    assert (share / "workspace").resolve() == checkout.resolve()
    assert (share / "workspace" / "package.json").read_text() == "new\n"
    assert not (share / "workspace" / "node_modules").exists()


def test_the_first_pods_fetch_on_an_empty_claim_works(tmp_path: Path) -> None:
    share = tmp_path / "share"
    share.mkdir()
    _run_fetch_prefix(GIT_SPEC, share)
    assert (share / "workspace" / "package.json").is_file()
    assert not (share / ".kept" / "node_modules").exists()
