"""The shipped Grafana dashboard (`deploy/grafana/pko.json`) and Prometheus alert rules
(`deploy/prometheus/rules.yaml`): each is well-formed for what loads it (the dashboard is schema-checked by
`grafana-dashboard-check`, which loads it into the Grafana Foundation SDK's typed dashboard model with its strict
decoder; the rule file by Prometheus's own `promtool check rules`, and its alerts by `promtool test rules` over the
unit tests shipped beside it), every expression parses as PromQL (`promql.py`), and every series it selects is one
the operator exports — the names come from the registry of the operator as `pko operator` wires it, not from a
list."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from helmchart import ROOT
from prometheus_client import CollectorRegistry
from promql import parse, parse_variable_query

from pko.testing import binaries, operator

DASHBOARD = ROOT / "deploy" / "grafana" / "pko.json"
RULES = ROOT / "deploy" / "prometheus" / "rules.yaml"
RULES_TESTS = ROOT / "deploy" / "prometheus" / "rules.test.yaml"
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created"),
            "summary": ("_count", "_sum", "_created"), "gauge": ("",), "info": ("_info",), "unknown": ("",)}
PANEL_TYPES = {"stat", "timeseries", "table", "gauge", "bargauge", "heatmap", "text", "row", "piechart"}
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: unused}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


def series_names(registry: CollectorRegistry) -> set[str]:
    """Every series name a registry's families expose (a counter `x` as `x_total`, a histogram as `x_bucket`,
    `x_count`, `x_sum`), whether or not a sample exists yet."""
    return {family.name + suffix for family in registry.collect() for suffix in SUFFIXES[family.type]}


@pytest.fixture(scope="module")
async def exported(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The series names of the operator's registry, with all its controllers wired (nothing is started: the API
    server address is never dialled)."""
    directory = tmp_path_factory.mktemp("operator")
    (directory / "kubeconfig").write_text(KUBECONFIG)
    op = operator.Operator(directory / "kubeconfig", directory / "workspaces")
    try:
        return series_names(op.manager.registry)
    finally:
        await op.client.close()


def _dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def _rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_the_registry_has_the_new_families(exported: set[str]) -> None:
    assert {"pulumi_update_duration_seconds_bucket", "pulumi_update_phase_duration_seconds_count",
            "pulumi_stack_resource_changes_total", "pulumi_stack_last_success_timestamp_seconds",
            "pulumi_stack_stalled", "stacks_failing", "stacks_active", "programs_active"} <= exported
    assert "pulumi_stack_resource_changes" not in exported  # a counter is queried with _total


# --- the dashboard -----------------------------------------------------------------------------------------------


def _binary(name: str) -> Path:
    try:
        return binaries.require(name)
    except binaries.MissingBinaryError as err:
        pytest.fail(str(err), pytrace=False)


@pytest.fixture(scope="module")
def dashboard_check() -> Path:
    return _binary("grafana-dashboard-check")


@pytest.fixture(scope="module")
def promtool() -> Path:
    return _binary("promtool")


def _run(*argv: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


def _schema_problems(check: Path, path: Path) -> list[str]:
    result = subprocess.run([str(check), str(path)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode in (0, 1), result.stderr
    problems = [line.removeprefix(f"{path}: ") for line in result.stdout.splitlines()]
    assert bool(problems) == (result.returncode == 1), result
    return problems


def test_the_dashboard_loads_into_grafanas_typed_dashboard_model(dashboard_check: Path) -> None:
    assert _schema_problems(dashboard_check, DASHBOARD) == []


def _misspelt_option(d: dict[str, Any]) -> None:
    legend = next(p for p in d["panels"] if p["type"] == "timeseries")["options"]["legend"]
    legend["placment"] = legend.pop("placement")


def _stat_without_reduce_options(d: dict[str, Any]) -> None:
    del next(p for p in d["panels"] if p["type"] == "stat")["options"]["reduceOptions"]


def _grid_width_as_text(d: dict[str, Any]) -> None:
    d["panels"][0]["gridPos"]["w"] = "4"


def _unknown_panel_type(d: dict[str, Any]) -> None:
    d["panels"][0]["type"] = "stats"


def _misspelt_query_field(d: dict[str, Any]) -> None:
    target = d["panels"][0]["targets"][0]
    target["exprr"] = target.pop("expr")


def _unknown_top_level_field(d: dict[str, Any]) -> None:
    d["refreshEvery"] = "1m"


@pytest.mark.parametrize(("damage", "named"), [
    (_misspelt_option, "unexpected field 'placment'"),
    (_stat_without_reduce_options, "options.reduceOptions: required field is missing"),
    (_grid_width_as_text, "panels[0].gridPos.w"),
    (_unknown_panel_type, 'unknown panel type "stats"'),
    (_misspelt_query_field, "unexpected field 'exprr'"),
    (_unknown_top_level_field, "unexpected field 'refreshEvery'"),
], ids=lambda v: v.__name__.strip("_") if callable(v) else "")
def test_the_schema_check_names_what_a_damaged_dashboard_gets_wrong(
    dashboard_check: Path, tmp_path: Path, damage: Any, named: str
) -> None:
    """The check is the schema's, not a rubber stamp: each kind of mistake in a copy of the dashboard fails it,
    and the message says where."""
    document = _dashboard()
    damage(document)
    copy = tmp_path / "pko.json"
    copy.write_text(json.dumps(document))
    problems = _schema_problems(dashboard_check, copy)
    assert any(named in problem for problem in problems), problems


def test_the_dashboard_has_a_prometheus_datasource_variable_the_others_use() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"]
    assert dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int)
    assert dashboard["schemaVersion"] >= 36  # panels' datasource as {type, uid}
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "stack"):
        assert variables[name]["type"] == "query"
        assert variables[name]["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert len(variables) == len(dashboard["templating"]["list"]), "variable names are unique"


def test_every_panel_is_placed_and_queries_the_datasource_variable() -> None:
    panels = _dashboard()["panels"]
    assert len(panels) >= 8
    assert len({p["id"] for p in panels}) == len(panels), "panel ids are unique"
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        assert panel["type"] in PANEL_TYPES, panel["title"]
        assert panel["title"]
        grid = panel["gridPos"]
        assert set(grid) == {"x", "y", "w", "h"}, panel["title"]
        assert min(grid["x"], grid["y"]) >= 0, panel["title"]
        assert min(grid["w"], grid["h"]) > 0, panel["title"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        covered = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                   for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not covered & cells, f"{panel['title']} overlaps another panel"
        cells |= covered
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        targets = panel["targets"]
        assert targets, panel["title"]
        assert len({t["refId"] for t in targets}) == len(targets), panel["title"]
        for target in targets:
            assert target["datasource"] == panel["datasource"]
            assert target["expr"].strip()


def _dashboard_queries() -> list[tuple[str, str]]:
    dashboard = _dashboard()
    found = [(f"panel {p['title']!r} {t['refId']}", t["expr"]) for p in dashboard["panels"] for t in p["targets"]]
    return found


def test_every_dashboard_query_parses_and_selects_only_exported_series(exported: set[str]) -> None:
    unknown = {}
    for where, expr in _dashboard_queries():
        metrics = parse(expr).metrics
        assert metrics, f"{where} selects no series: {expr}"
        if metrics - exported:
            unknown[where] = sorted(metrics - exported)
    for variable in _dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            metrics = parse_variable_query(variable["query"]["query"]).metrics
            if metrics - exported:
                unknown[f"variable {variable['name']}"] = sorted(metrics - exported)
    assert not unknown, f"series the operator does not export: {unknown}"


def test_the_dashboard_uses_every_pulumi_family(exported: set[str]) -> None:
    """Each of pko's update metrics has a panel (a new metric without one fails here)."""
    used = {m for _, expr in _dashboard_queries() for m in parse(expr).metrics}
    families = {re.sub(r"_(bucket|count|sum|total|created)$", "", name) for name in exported
                if name.startswith("pulumi_")}
    unused = {f for f in families if not any(m.startswith(f) for m in used)}
    assert not unused, f"no panel shows {sorted(unused)}"


# --- the rules ---------------------------------------------------------------------------------------------------

DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")


def test_the_rules_file_is_a_prometheus_rule_file() -> None:
    document = yaml.safe_load(RULES.read_text())
    assert set(document) == {"groups"}
    names = [group["name"] for group in document["groups"]]
    assert len(set(names)) == len(names)
    for group in document["groups"]:
        assert set(group) <= {"name", "interval", "rules", "limit"}
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rule["alert"]), rule
            assert DURATION.match(rule["for"]), rule["alert"]
            assert rule["labels"]["severity"] in ("info", "warning", "critical"), rule["alert"]
            assert rule["annotations"]["summary"], rule["alert"]
            assert rule["annotations"]["description"], rule["alert"]


def test_the_rules_cover_staleness_stalls_and_failure_rates() -> None:
    metrics = {rule["alert"]: parse(rule["expr"]).metrics for rule in _rules()}
    assert "pulumi_stack_last_success_timestamp_seconds" in metrics["PulumiStackNoRecentSuccess"]
    assert metrics["PulumiStackStalled"] == {"pulumi_stack_stalled"}
    assert metrics["PulumiStackUpdatesFailing"] == {"pulumi_update_duration_seconds_count"}
    assert metrics["PulumiUpdateFailureRateHigh"] == {"pulumi_update_duration_seconds_count"}


def test_every_rule_parses_and_selects_only_exported_series(exported: set[str]) -> None:
    unknown = {rule["alert"]: sorted(parse(rule["expr"]).metrics - exported) for rule in _rules()}
    assert not {k: v for k, v in unknown.items() if v}, f"series the operator does not export: {unknown}"


def test_promtool_checks_the_rules_file(promtool: Path) -> None:
    done = _run(promtool, "check", "rules", RULES)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in done.stdout, done.stdout


def _damaged_rules(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    document = yaml.safe_load(RULES.read_text())
    change(document["groups"][0]["rules"][1])
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.mark.parametrize(("change", "named"), [
    (lambda rule: rule.update(expr="max by (namespace (pulumi_stack_stalled)"), "parse error"),
    (lambda rule: rule.update({"for": "10 minutes"}), "in duration \"10 minutes\""),
    (lambda rule: rule.update(severity="warning"), "field severity not found"),
], ids=["unbalanced-expression", "bad-duration", "misplaced-field"])
def test_promtool_refuses_a_damaged_rules_file(promtool: Path, tmp_path: Path,
                                              change: Callable[[dict[str, Any]], None], named: str) -> None:
    done = _run(promtool, "check", "rules", _damaged_rules(tmp_path, change))
    assert done.returncode != 0, done.stdout
    assert named in done.stdout + done.stderr, done.stdout + done.stderr


def test_the_alerts_pass_their_unit_tests(promtool: Path) -> None:
    """`promtool test rules`: each alert fires on the series it is for, after its `for:`, with its labels and
    rendered annotations, and stays quiet on the healthy Stacks beside them."""
    done = _run(promtool, "test", "rules", RULES_TESTS.name, cwd=RULES_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    tests = yaml.safe_load(RULES_TESTS.read_text())
    assert tests["rule_files"] == [RULES.name]
    firing = {case["alertname"] for test in tests["tests"] for case in test["alert_rule_test"] if case["exp_alerts"]}
    assert firing == {rule["alert"] for rule in _rules()}, "every alert has a unit test where it fires"


def test_a_retuned_rule_fails_its_unit_test(promtool: Path, tmp_path: Path) -> None:
    """The unit tests bind the rules: a rule whose `for:` changed without its test being updated fails."""
    (tmp_path / RULES.name).write_text(_damaged_rules(tmp_path, lambda rule: rule.update({"for": "30m"})).read_text())
    (tmp_path / RULES_TESTS.name).write_text(RULES_TESTS.read_text())
    done = _run(promtool, "test", "rules", RULES_TESTS.name, cwd=tmp_path)
    assert done.returncode != 0, done.stdout
    assert "PulumiStackStalled" in done.stdout + done.stderr, done.stdout + done.stderr


def test_annotation_templates_are_balanced() -> None:
    for rule in _rules():
        for text in rule["annotations"].values():
            assert text.count("{{") == text.count("}}"), rule["alert"]
            for inner in re.findall(r"\{\{(.*?)\}\}", text):
                assert re.fullmatch(r"\s*\$(labels\.\w+|value)(\s*\|\s*\w+)?\s*", inner), (rule["alert"], inner)


def test_the_files_are_where_the_docs_say() -> None:
    text = (ROOT / "docs" / "metrics.md").read_text()
    for path in (DASHBOARD, RULES):
        assert str(path.relative_to(ROOT)) in text
    assert Path(DASHBOARD).read_text().endswith("\n")


def test_the_documented_example_queries_parse_and_select_exported_series(exported: set[str]) -> None:
    text = (ROOT / "docs" / "metrics.md").read_text()
    blocks = re.findall(r"```promql\n(.*?)```", text, re.DOTALL)
    queries = [line for block in blocks for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert len(queries) >= 5
    unknown = {query: sorted(parse(query).metrics - exported) for query in queries}
    assert not {k: v for k, v in unknown.items() if v}, unknown
