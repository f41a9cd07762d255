"""A StackRollout's health gates: a PromQL query, an HTTP check and a condition on Stack outputs.

Why: a wave is healthy when the applications it changed are, not merely when their updates succeeded (the Go
operator's own rollout guide stops at the latter). Each check gives a ``plan.GateCheck``: the reading of an answer is
pure (``*_result``), the request is the only I/O (:func:`check`). A gate that cannot be
asked (refused connection, timeout, a Prometheus error) is an unhealthy check with the reason: ``failureLimit``
checks in a row are needed to fail the gate, so a blip does not roll a fleet back.

Must never: put a response body, a URL's credentials or query, a header value or an output value in a message
(they may be secret); follow a redirect.
"""

from __future__ import annotations

import base64
import math
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pko.api import rollout as api
from pko.controllers.rollout.plan import GateCheck, StackView

if TYPE_CHECKING:
    import httpx

DEFAULT_HTTP_TIMEOUT = 10.0
MAX_SHOWN = 5


class GateClient:
    """The HTTP client of the HTTP and Prometheus gates, made when the first such gate is checked: an operator
    whose rollouts use neither (or that has no rollouts) never loads httpx and its TLS context, a few MB of its
    memory. Never follows a redirect."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        self.headers = dict(headers)
        self._client: httpx.AsyncClient | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(follow_redirects=False, headers=self.headers)
        return self._client

    async def get(self, url: str, **options: Any) -> httpx.Response:
        return await self.client.get(url, **options)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _where(url: str) -> str:
    """`url` without credentials, query or fragment: safe to show."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = f"{parts.hostname}:{parts.port}" if parts.port else parts.hostname or ""
    except ValueError:
        return "the gate's URL"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


def prometheus_result(gate: api.PrometheusGate, answer: Mapping[str, Any]) -> GateCheck:
    """Read an ``/api/v1/query`` answer: healthy when it holds at least one sample and each is within the bounds
    (without bounds: non-zero)."""
    if answer.get("status") != "success":
        return GateCheck(False, f"Prometheus answered {answer.get('errorType') or 'an error'}: "
                                f"{str(answer.get('error') or '')[:200]}")
    data = answer.get("data") or {}
    kind, result = data.get("resultType"), data.get("result")
    samples: list[tuple[str, float]] = []
    if kind == "vector":
        for item in result or []:
            labels = item.get("metric") or {}
            shown = ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__")
            samples.append((f"{{{shown}}}", float((item.get("value") or [0, "nan"])[1])))
    elif kind == "scalar" and isinstance(result, list) and len(result) == 2:
        samples.append(("scalar", float(result[1])))
    else:
        return GateCheck(False, f"the query returned a {kind}: a gate needs an instant vector or a scalar")
    if not samples:
        return GateCheck(False, "the query returned no sample")

    def bad(value: float) -> bool:
        if math.isnan(value):
            return True
        if gate.min is None and gate.max is None:
            return value == 0
        return (gate.min is not None and value < gate.min) or (gate.max is not None and value > gate.max)
    outside = [(where, value) for where, value in samples if bad(value)]
    low = "-inf" if gate.min is None else f"{gate.min:g}"
    high = "+inf" if gate.max is None else f"{gate.max:g}"
    bounds = "non-zero" if gate.min is None and gate.max is None else f"within [{low}, {high}]"
    if outside:
        shown = ", ".join(f"{where} {value:g}" for where, value in outside[:MAX_SHOWN])
        more = f" and {len(outside) - MAX_SHOWN} more" if len(outside) > MAX_SHOWN else ""
        verb = "sample is" if len(samples) == 1 else "samples are"
        return GateCheck(False, f"{len(outside)} of {len(samples)} {verb} not {bounds}: {shown}{more}")
    return GateCheck(True, f"{len(samples)} {'sample' if len(samples) == 1 else 'samples'}, all {bounds}")


def http_result(gate: api.HTTPGate, status: int, body: str) -> GateCheck:
    """Read an HTTP answer: healthy with an expected status (any 2xx by default) and, when asked, the text."""
    expected = status in gate.expect_status if gate.expect_status else 200 <= status < 300
    where = _where(gate.url)
    if not expected:
        return GateCheck(False, f"GET {where} answered {status}")
    if gate.body_contains is not None and gate.body_contains not in body:
        return GateCheck(False, f"GET {where} answered {status} without the expected text")
    return GateCheck(True, f"GET {where} answered {status}")


def outputs_result(gate: api.OutputsGate, stacks: Sequence[StackView]) -> GateCheck:
    """Healthy when every Stack has the output (with the value, when given)."""
    if not stacks:
        return GateCheck(True, "no Stack at the revision yet")
    missing = [s.name for s in stacks if gate.output not in s.outputs]
    wrong = [s.name for s in stacks if gate.output in s.outputs and gate.equals is not None
             and s.outputs[gate.output] != gate.equals]
    if missing or wrong:
        parts = []
        if missing:
            parts.append(f"no output {gate.output} on {', '.join(missing[:MAX_SHOWN])}")
        if wrong:
            parts.append(f"output {gate.output} has another value on {', '.join(wrong[:MAX_SHOWN])}")
        return GateCheck(False, "; ".join(parts))
    return GateCheck(True, f"output {gate.output} as expected on {len(stacks)} Stacks")


def headers_of(secret: Mapping[str, Any] | None, name: str) -> dict[str, str] | GateCheck:
    """The headers a gate's `headersSecretRef` names (the Secret's keys and decoded values), or the failed check
    that says why there are none (never a value)."""
    if secret is None:
        return GateCheck(False, f"Secret {name} (headersSecretRef) not found")
    headers = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            headers[str(key)] = base64.b64decode(value).decode()
        except ValueError:
            return GateCheck(False, f"Secret {name} (headersSecretRef): the value of {key} is not text")
    return headers


async def check(gate: api.Gate, stacks: Sequence[StackView], client: httpx.AsyncClient | GateClient,
                headers: Mapping[str, str] | None = None) -> GateCheck:
    """Run one check of `gate`; `stacks` are those the rollout has moved to the revision so far; `headers` go with
    the request."""
    try:
        if gate.prometheus is not None:
            url = gate.prometheus.address.rstrip("/") + "/api/v1/query"
            answer = await client.get(url, params={"query": gate.prometheus.query}, timeout=DEFAULT_HTTP_TIMEOUT,
                                      headers=headers)
            try:
                body = answer.json()
            except ValueError:
                body = None
            if not isinstance(body, dict):
                return GateCheck(False, f"Prometheus at {_where(url)} answered {answer.status_code} without a "
                                        "query result")
            return prometheus_result(gate.prometheus, body)
        if gate.http is not None:
            answer = await client.get(gate.http.url, timeout=float(gate.http.timeout_seconds or DEFAULT_HTTP_TIMEOUT),
                                      headers=headers)
            return http_result(gate.http, answer.status_code, answer.text)
        if gate.outputs is not None:
            return outputs_result(gate.outputs, stacks)
    except Exception as err:  # unreachable, a bad URL, an answer that is not what a gate reads: a failed check
        target = gate.prometheus.address if gate.prometheus else gate.http.url if gate.http else ""
        return GateCheck(False, f"{_where(target)} could not be asked: {type(err).__name__}")
    return GateCheck(False, "the gate names no check")
