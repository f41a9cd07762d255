"""The test-side PromQL parser (`promql.py`) that checks the shipped dashboard and alert rules: it accepts what
Prometheus accepts in them, refuses what Prometheus refuses, and names the selected series exactly."""

from __future__ import annotations

import pytest
from promql import PromQLError, parse, parse_variable_query, tokenize


@pytest.mark.parametrize(("expr", "metrics"), [
    ("up", {"up"}),
    ('sum by (result) (rate(pulumi_update_duration_seconds_count{namespace=~"$namespace"}[$__rate_interval]))',
     {"pulumi_update_duration_seconds_count"}),
    ("histogram_quantile(0.95, sum by (le, type) (rate(pulumi_update_duration_seconds_bucket[5m])))",
     {"pulumi_update_duration_seconds_bucket"}),
    ('time() - max by (namespace, stack) (pulumi_stack_last_success_timestamp_seconds{type="up"}) > 6 * 3600 '
     'and on (namespace, stack) label_replace(stacks_failing == 1, "stack", "$1", "name", "(.*)")',
     {"pulumi_stack_last_success_timestamp_seconds", "stacks_failing"}),
    ("sum(rate(a_total[1h])) / sum(rate(b_total[1h])) > bool 0.5", {"a_total", "b_total"}),
    ("a * on (x) group_left (y) b", {"a", "b"}),
    ("sum(x) without (le)", {"x"}),
    ("max_over_time(rate(x[5m])[1h:1m])", {"x"}),
    ("x offset 5m", {"x"}),
    ('{__name__="x"}', set()),
    ("-x ^ 2 ^ 3", {"x"}),
    ("topk(3, x)", {"x"}),
    ("# a comment\nx", {"x"}),
])
def test_valid_expressions_and_the_series_they_select(expr: str, metrics: set[str]) -> None:
    assert parse(expr).metrics == metrics


@pytest.mark.parametrize("expr", [
    "sum(rate(x[5m])",  # unbalanced
    "rate(x[5m]))",
    "x{a=\"b\"",
    "x +",  # an operator needs two operands
    "* x",
    "x y",  # two expressions
    "rate(x)",  # rate needs a range
    "x[5m]",  # a range is no result
    "abs(x[5m])",
    "x[5]",  # a range needs a duration
    "x{a=b}",  # label values are quoted
    "x{a~\"b\"}",
    "nosuchfunction(x)",
    "histogram_quantile(x)",
    "1 and x",  # set operators need vectors
    '"text"',
    "{}",  # a selector needs a name or a matcher
    'sum by (a (x)',
    "x @",
    "",
])
def test_invalid_expressions_are_refused(expr: str) -> None:
    with pytest.raises(PromQLError):
        parse(expr)


def test_tokens_keep_strings_durations_and_variables_whole() -> None:
    kinds = [(t.kind, t.text) for t in tokenize('x{a="b c"}[1h30m] + ${var}')][:-1]
    assert kinds == [("ident", "x"), ("op", "{"), ("ident", "a"), ("op", "="), ("string", '"b c"'), ("op", "}"),
                     ("op", "["), ("duration", "1h30m"), ("op", "]"), ("op", "+"), ("variable", "${var}")]


def test_grafana_variable_queries() -> None:
    assert parse_variable_query("label_values(pulumi_update_duration_seconds_count, namespace)").metrics == {
        "pulumi_update_duration_seconds_count"}
    assert parse_variable_query('label_values(stacks_failing{namespace=~"$namespace"}, name)').metrics == {
        "stacks_failing"}
    with pytest.raises(PromQLError):
        parse_variable_query("label_values(x{, namespace)")
    with pytest.raises(PromQLError):
        parse_variable_query("metrics(.*)")
