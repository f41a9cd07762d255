"""The operator's settings table (pko.controllers.settings) matches the chart and the docs: each setting's chart
value is used by the chart's templates, each variable is documented, and flags parse into the same Settings the
table declares."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helmchart import CHART, ROOT, Render

from pko.controllers import settings
from pko.controllers.stack import setup as stack_setup
from pko.controllers.stack import sync

POLICY_VARIABLES = {"MAX_UPDATE_FAILURES", "RETRY_BACKOFF_BASE", "RETRY_BACKOFF_FACTOR", "RETRY_MAX_BACKOFF_DURATION",
                    "STALLED_RETRY_INTERVAL"}


def test_every_helm_value_of_a_setting_is_used_by_the_chart() -> None:
    templates = "".join(path.read_text() for path in (CHART / "templates").iterdir() if path.is_file())
    missing = [o.helm for o in settings.OPTIONS if o.helm and f".Values.{o.helm}" not in templates]
    assert not missing, f"the chart's templates do not use {missing}"


def test_every_environment_variable_is_documented() -> None:
    text = (ROOT / "docs" / "operator.md").read_text()
    missing = [o.env for o in settings.OPTIONS if o.env and o.env not in text]
    assert not missing, f"docs/operator.md does not mention {missing}"


def test_flags_and_environment_make_settings() -> None:
    environ = {"MAX_CONCURRENT_RECONCILES": "7", "POD_NAMESPACE": "ops", "AGENT_IMAGE": "", "KUBE_API_TIMEOUT": "1m"}
    args = settings.parser(environ).parse_args(["--workspace-runtime", "local", "--retry-max-backoff", "1h"])
    made = settings.from_args(args, "v1", environ)
    assert (made.workers, made.operator_namespace, made.agent_image) == (7, "ops", None)
    assert (made.kube_api_timeout, made.retry_max_backoff, made.workspace_runtime) == (60.0, 3600.0, "local")
    assert (made.max_operations, made.lease_duration, made.operator_service_account) == (200, 60.0,
                                                                                           "controller-manager")


def test_failure_policy_from_chart_values_to_the_stack_policy(render: Render) -> None:
    """The chart's failure-policy values become the operator's variables, and those its Stack policy; 0 failures
    is a value (stall at once), not "unset"."""
    objects = render({"controller": {"maxUpdateFailures": 0, "retryBackoffBase": "30s", "retryBackoffFactor": 1.5,
                                     "retryMaxBackoff": "2h", "stalledRetryInterval": "6h"}})
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    container = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "manager")
    environ = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert {k: v for k, v in environ.items() if k in POLICY_VARIABLES} == {
        "MAX_UPDATE_FAILURES": "0", "RETRY_BACKOFF_BASE": "30s", "RETRY_BACKOFF_FACTOR": "1.5",
        "RETRY_MAX_BACKOFF_DURATION": "2h", "STALLED_RETRY_INTERVAL": "6h"}
    made = settings.from_args(settings.parser(environ).parse_args([]), "v1", environ)
    assert stack_setup.retry_policy(made) == sync.RetryPolicy(max_failures=0, backoff_base=30.0, backoff_factor=1.5,
                                                              max_backoff=7200.0, stalled_retry_interval=21600.0)


def test_default_chart_leaves_the_reference_failure_policy(render: Render) -> None:
    deployment = next(o for o in render() if o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert not {e["name"] for e in container["env"]} & POLICY_VARIABLES
    made = settings.from_args(settings.parser({}).parse_args([]), "v1", {})
    assert stack_setup.retry_policy(made) == sync.RetryPolicy(max_failures=3, backoff_base=10.0, backoff_factor=3.0,
                                                              max_backoff=86400.0, stalled_retry_interval=0.0)


@pytest.mark.parametrize(("args", "message"), [
    (["--max-update-failures", "-1"], "non-negative integer must be at least 0: '-1'"),
    (["--max-update-failures", "two"], "invalid non-negative integer: 'two'"),
    (["--retry-backoff-base", "0s"], "positive duration must be greater than 0: '0s'"),
    (["--retry-backoff-factor", "0.5"], "factor of at least 1 must be at least 1: '0.5'"),
    (["--retry-max-backoff=-1h"], "positive duration must be greater than 0: '-1h'"),
    (["--stalled-retry-interval", "soon"], "invalid non-negative duration: 'soon'"),
])
def test_meaningless_failure_policy_flags_are_refused(args: list[str], message: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        settings.parser({}).parse_args(args)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_workspace_idle_timeout_from_the_chart_value_and_off_by_default(render: Render) -> None:
    """pko's scale-to-zero default (docs/scale-to-zero.md): the chart value becomes WORKSPACE_IDLE_TIMEOUT and that
    the operator's default in seconds; unset, workspaces never sleep (the Go operator's always-running pods)."""
    deployment = next(o for o in render({"controller": {"workspaceIdleTimeout": "15m"}}) if o["kind"] == "Deployment")
    container = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "manager")
    environ = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert environ["WORKSPACE_IDLE_TIMEOUT"] == "15m"
    assert settings.from_args(settings.parser(environ).parse_args([]), "v1", environ).workspace_idle_timeout == 900.0
    default = next(o for o in render() if o["kind"] == "Deployment")
    default_env = default["spec"]["template"]["spec"]["containers"][0]["env"]
    assert "WORKSPACE_IDLE_TIMEOUT" not in {e["name"] for e in default_env}
    assert settings.from_args(settings.parser({}).parse_args([]), "v1", {}).workspace_idle_timeout == 0.0


@pytest.mark.parametrize(("value", "variable", "setting", "default"), [
    # docs/config-without-restart.md: on unless the chart turns it off
    ("workspaceConfigInPlace", "WORKSPACE_CONFIG_IN_PLACE", "config_in_place", True),
    # docs/install.md: workspace pods copy the agent (the Go operator's way) unless the chart says otherwise
    ("workspaceAgentImageVolume", "WORKSPACE_AGENT_IMAGE_VOLUME", "agent_image_volume", False),
])
@pytest.mark.parametrize("given", [None, True, False])
def test_a_switch_from_the_chart_value_or_its_default(render: Render, value: str, variable: str, setting: str,
                                                      default: bool, given: bool | None) -> None:
    """A pko switch of the chart's `controller` values: unset, no variable and the setting's default; set, the
    variable says it and the operator's setting follows."""
    deployment = next(o for o in render({"controller": {} if given is None else {value: given}})
                      if o["kind"] == "Deployment")
    container = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "manager")
    environ = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert environ.get(variable) == (None if given is None else str(given).lower())
    made = settings.from_args(settings.parser(environ).parse_args([]), "v1", environ)
    assert getattr(made, setting) is (default if given is None else given)


def test_a_meaningless_config_in_place_value_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        settings.parser({}).parse_args(["--workspace-config-in-place", "sometimes"])
    assert exited.value.code == 2
    assert "not true or false: 'sometimes'" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["--workspace-idle-timeout=-5m"], "non-negative duration must be at least 0: '-5m'"),
    (["--workspace-idle-timeout", "soon"], "invalid non-negative duration: 'soon'"),
])
def test_a_meaningless_idle_timeout_flag_is_refused(args: list[str], message: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        settings.parser({}).parse_args(args)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_kube_api_rate_limit_flags_and_chart_values(render: Render) -> None:
    """`--kube-api-qps`/`--kube-api-burst` (pko additions): off by default, as the reference; the chart's
    `kubeAPI.{qps,burst}` become their variables, and those the settings."""
    made = settings.from_args(settings.parser({}).parse_args([]), "v1", {})
    assert (made.kube_api_qps, made.kube_api_burst) == (0.0, 0)
    args = settings.parser({}).parse_args(["--kube-api-qps", "7.5", "--kube-api-burst", "12"])
    assert (settings.from_args(args, "v1", {}).kube_api_qps, settings.from_args(args, "v1", {}).kube_api_burst) == (
        7.5, 12)
    with pytest.raises(SystemExit):
        settings.parser({}).parse_args(["--kube-api-qps", "-1"])
    deployment = next(o for o in render({"kubeAPI": {"qps": 20, "burst": 30}}) if o["kind"] == "Deployment")
    container = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "manager")
    environ = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert (environ["KUBE_API_QPS"], environ["KUBE_API_BURST"]) == ("20", "30")
    made = settings.from_args(settings.parser(environ).parse_args([]), "v1", environ)
    assert (made.kube_api_qps, made.kube_api_burst) == (20.0, 30)
    default = next(o for o in render() if o["kind"] == "Deployment")
    names = {e["name"] for e in default["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert not names & {"KUBE_API_QPS", "KUBE_API_BURST"}


def test_the_dependency_cache_from_chart_values_with_its_volume_and_off_by_default(render: Render) -> None:
    """docs/air-gapped.md: `dependencyCache.upstreams` turns the cache on, in an emptyDir sized like the cache."""
    values = {"dependencyCache": {"upstreams": "plugins=http://mirror.example/plugins", "size": "2Gi",
                                  "indexTTL": "1m"}}
    deployment = next(o for o in render(values) if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "manager")
    environ = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    made = settings.from_args(settings.parser(environ).parse_args([]), "v1", environ)
    assert made.dependency_cache_upstreams == {"plugins": "http://mirror.example/plugins"}
    assert (str(made.dependency_cache_dir), made.dependency_cache_size, made.dependency_cache_index_ttl) == (
        "/var/cache/pko", 2 * 1024**3, 60.0)
    assert {"name": "dependency-cache", "mountPath": "/var/cache/pko"} in container["volumeMounts"]
    assert {"name": "dependency-cache", "emptyDir": {"sizeLimit": "2Gi"}} in pod["volumes"]
    default = next(o for o in render() if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert "volumes" not in default
    assert not any(e["name"].startswith("DEPENDENCY_CACHE") for e in default["containers"][0]["env"])


def test_the_pool_of_active_workspaces_needs_a_slot(render: Render, helm: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`--max-active-workspaces` (flag, variable, chart value): unset is no bound; 0, a negative number or a word
    is refused with a message that says what is wanted — at the flag, from the variable, and when the chart
    renders."""
    assert settings.from_args(settings.parser({}).parse_args([]), "v1", {}).max_active_workspaces is None
    environ = {"MAX_ACTIVE_WORKSPACES": "20"}
    assert settings.from_args(settings.parser(environ).parse_args([]), "v1", environ).max_active_workspaces == 20
    for environ, args, said in (({}, ["--max-active-workspaces", "0"], "the pool needs at least 1 slot: '0'"),
                                ({}, ["--max-active-workspaces", "-3"], "the pool needs at least 1 slot: '-3'"),
                                ({"MAX_ACTIVE_WORKSPACES": "many"}, [], "invalid number of workspaces: 'many'")):
        with pytest.raises(SystemExit):
            settings.parser(environ).parse_args(args)
        assert f"argument --max-active-workspaces: {said}" in capsys.readouterr().err
    deployment = next(o for o in render({"controller": {"maxActiveWorkspaces": 20}}) if o["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["MAX_ACTIVE_WORKSPACES"] == "20"
    default = next(o for o in render() if o["kind"] == "Deployment")
    container = default["spec"]["template"]["spec"]["containers"][0]
    assert "MAX_ACTIVE_WORKSPACES" not in {e["name"] for e in container["env"]}
    values = tmp_path / "values.yaml"
    values.write_text("controller:\n  maxActiveWorkspaces: 0\n")
    done = subprocess.run([str(helm), "template", "pko", str(CHART), "--values", str(values)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0
    assert "controller.maxActiveWorkspaces must be at least 1, not 0" in done.stderr


def test_a_github_enterprise_api_url_is_taken_and_anything_else_refused(capsys: pytest.CaptureFixture[str]) -> None:
    made = settings.from_args(settings.parser({}).parse_args(["--github-api-url", "https://ghe.example.com/api/v3/"]),
                              "v1", {})
    assert made.github_api_url == "https://ghe.example.com/api/v3"
    assert settings.from_args(settings.parser({}).parse_args([]), "v1", {}).github_api_url == "https://api.github.com"
    with pytest.raises(SystemExit):
        settings.parser({}).parse_args(["--github-api-url", "ghe.example.com"])
    assert "invalid URL: 'ghe.example.com'" in capsys.readouterr().err


def test_a_kept_share_volume_from_the_chart_to_the_workspace_statefulset(render: Render) -> None:
    """`controller.workspaceShareVolume` becomes the operator's variables, and those the claim every workspace's
    StatefulSet gets; the default chart gives none (an emptyDir, as the Go operator)."""
    from pko.api import workspace as ws_api
    from pko.controllers.workspace import manifests

    deployment = next(o for o in render({"controller": {"workspaceShareVolume": {
        "size": "3Gi", "storageClass": "local-path"}}}) if o["kind"] == "Deployment")
    environ = {e["name"]: e["value"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
               if "value" in e}
    assert (environ["WORKSPACE_SHARE_VOLUME_SIZE"], environ["WORKSPACE_SHARE_VOLUME_STORAGE_CLASS"]) == (
        "3Gi", "local-path")
    made = settings.from_args(settings.parser(environ).parse_args([]), "v1", environ)
    volume = manifests.ShareVolume(made.workspace_share_volume_size or "", made.workspace_share_volume_storage_class)
    workspace = ws_api.Workspace.model_validate({"metadata": {"name": "w", "namespace": "n"},
                                                 "spec": {"git": {"url": "https://g/r.git", "ref": "main"}}})
    claim = manifests.statefulset(workspace, manifests.AgentImage("pko:1"), volume=volume)["spec"][
        "volumeClaimTemplates"][0]
    assert claim["spec"]["resources"]["requests"]["storage"] == "3Gi"
    assert claim["spec"]["storageClassName"] == "local-path"
    default = next(o for o in render() if o["kind"] == "Deployment")
    names = {e["name"] for e in default["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert not {"WORKSPACE_SHARE_VOLUME_SIZE", "WORKSPACE_SHARE_VOLUME_STORAGE_CLASS"} & names
