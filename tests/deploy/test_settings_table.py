"""The operator's settings table (pko.controllers.settings) matches the chart and the docs: each setting's chart
value is used by the chart's templates, each variable is documented, and flags parse into the same Settings the
table declares."""

from __future__ import annotations

from helmchart import CHART, ROOT

from pko.controllers import settings


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
