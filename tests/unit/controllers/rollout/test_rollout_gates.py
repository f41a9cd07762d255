"""Reading a health gate's answer (pko.controllers.rollout.gates): what is healthy, and that no message carries a
response body, a URL's credentials, a header or an output's value."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from pko.api import rollout as api
from pko.controllers.rollout import gates, plan


def _vector(*values: str) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"__name__": "app_healthy", "stack": f"s{i}"}, "value": [1.0, v]} for i, v in enumerate(values)]}}


@pytest.mark.parametrize(("bounds", "values", "healthy"), [
    ({}, ("1", "1"), True),
    ({}, ("1", "0"), False),
    ({}, (), False),
    ({}, ("NaN",), False),
    ({"max": 0.5}, ("0.1", "0.5"), True),
    ({"max": 0.5}, ("0.6",), False),
    ({"min": 1, "max": 3}, ("2",), True),
    ({"min": 1}, ("0.5",), False),
])
def test_a_promql_gate_needs_samples_within_its_bounds(bounds: dict[str, float], values: tuple[str, ...],
                                                       healthy: bool) -> None:
    gate = api.PrometheusGate.model_validate({"address": "http://p:9090", "query": "app_healthy", **bounds})
    assert gates.prometheus_result(gate, _vector(*values)).healthy is healthy


def test_a_promql_gate_names_the_samples_out_of_bounds_and_refuses_errors_and_matrices() -> None:
    gate = api.PrometheusGate.model_validate({"address": "http://p:9090", "query": "app_healthy"})
    check = gates.prometheus_result(gate, _vector("1", "0"))
    assert check.message == "1 of 2 samples are not non-zero: {stack=s1} 0"
    assert not gates.prometheus_result(gate, {"status": "error", "errorType": "bad_data", "error": "parse"}).healthy
    matrix = {"status": "success", "data": {"resultType": "matrix", "result": []}}
    assert "needs an instant vector" in gates.prometheus_result(gate, matrix).message
    assert gates.prometheus_result(gate, {"status": "success", "data": {"resultType": "scalar",
                                                                         "result": [1, "2"]}}).healthy


def test_an_http_gate_checks_status_and_text_and_never_shows_the_body_or_credentials() -> None:
    gate = api.HTTPGate.model_validate({"url": "https://user:secret@app.example:8443/healthz?token=t",
                                        "bodyContains": "ok"})
    check = gates.http_result(gate, 200, "status: ok")
    assert check.healthy
    assert check.message == "GET https://app.example:8443/healthz answered 200"
    assert not gates.http_result(gate, 200, "private-data").healthy
    assert "private-data" not in gates.http_result(gate, 200, "private-data").message
    assert not gates.http_result(gate, 503, "ok").healthy
    listed = api.HTTPGate.model_validate({"url": "http://a/", "expectStatus": [418]})
    assert gates.http_result(listed, 418, "").healthy
    assert not gates.http_result(listed, 200, "").healthy


def _view(name: str, outputs: dict[str, Any]) -> plan.StackView:
    return plan.view({"metadata": {"name": name}, "status": {"outputs": outputs}})


def test_an_outputs_gate_needs_the_value_on_every_stack_and_does_not_show_it() -> None:
    gate = api.OutputsGate.model_validate({"output": "version", "equals": "v2"})
    assert gates.outputs_result(gate, [_view("a", {"version": "v2"}), _view("b", {"version": "v2"})]).healthy
    check = gates.outputs_result(gate, [_view("a", {"version": "v2"}), _view("b", {"version": "sekrit"}),
                                        _view("c", {})])
    assert not check.healthy
    assert check.message == "no output version on c; output version has another value on b"
    present = api.OutputsGate.model_validate({"output": "url"})
    assert gates.outputs_result(present, [_view("a", {"url": "x"})]).healthy


async def test_a_gate_that_cannot_be_read_is_a_failed_check_not_an_error() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/query":
            return httpx.Response(200, json=["not", "a", "result"])
        return httpx.Response(200, content=b"\xff\xfe not utf-8")

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        prom = api.Gate.model_validate({"name": "p", "prometheus": {"address": "http://p:9090", "query": "up"}})
        check = await gates.check(prom, [], client)
        assert not check.healthy
        assert "without a query result" in check.message
        web = api.Gate.model_validate({"name": "h", "http": {"url": "http://app/x", "bodyContains": "ok"}})
        assert not (await gates.check(web, [], client)).healthy
        bad = api.Gate.model_validate({"name": "b", "http": {"url": "http://[::bad"}})
        check = await gates.check(bad, [], client)
        assert not check.healthy
        assert "could not be asked" in check.message


def test_bounds_and_counts_read_as_a_person_writes_them() -> None:
    gate = api.PrometheusGate.model_validate({"address": "http://p:9090", "query": "x", "min": 1})
    assert gates.prometheus_result(gate, _vector("1")).message == "1 sample, all within [1, +inf]"
    assert gates.prometheus_result(gate, _vector("0")).message == "1 of 1 sample is not within [1, +inf]: {stack=s0} 0"


async def test_headers_from_a_secret_go_with_each_check_and_never_into_a_message() -> None:
    import base64

    secret = {"data": {"Authorization": base64.b64encode(b"Bearer s3cret").decode()}}
    headers = gates.headers_of(secret, "token")
    assert headers == {"Authorization": "Bearer s3cret"}
    missing = gates.headers_of(None, "token")
    assert isinstance(missing, plan.GateCheck)
    assert missing.message == "Secret token (headersSecretRef) not found"
    assert not missing.healthy

    def answer(request: httpx.Request) -> httpx.Response:
        ok = request.headers.get("Authorization") == "Bearer s3cret"
        return httpx.Response(200 if ok else 401, content=b"ok")

    gate = api.Gate.model_validate({"name": "h", "http": {"url": "http://app/healthz"},
                                    "headersSecretRef": {"name": "token"}})
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        assert (await gates.check(gate, [], client, {"Authorization": "Bearer s3cret"})).healthy
        refused = await gates.check(gate, [], client)
        assert not refused.healthy
        assert "s3cret" not in refused.message
