"""Many Stacks with the operator's API request rate bounded low (``--kube-api-qps``/``--kube-api-burst``):
everything converges, the operator never sees a 429, its request rate stays within the bucket's bound, the
limit really paced it (requests waited), and every work queue drains.

`make test` runs 10 Stacks (and 4 under the tightest limit); ``make soak`` (``PKO_SOAK=1``) runs 200 (and 8)."""

from __future__ import annotations

import asyncio
import os
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from pko.kube import client as kclient
from pko.testing import ports
from pko.testing.waiting import eventually

from . import chaos

SOAK = bool(os.environ.get("PKO_SOAK"))
STACKS = 200 if SOAK else 10
# Under 2 requests a second, even 4 Stacks (about 35 requests each) queue their requests for a minute: far longer
# than the 4s renew deadline the Lease must survive.
LEASE_STACKS = 8 if SOAK else 4
# Low enough that the fleet's first reconciles (all its Stacks at once) wait for tokens: at 25/s with a burst of 25,
# 20 Stacks' 503 requests in 73 s never waited once (CI), so the test no longer showed the limit pacing anything;
# at 10/s, burst 10, they waited 605 s summed. 10 Stacks ask about half as much of half the bucket.
QPS, BURST = 5.0, 5


def _metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _total(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


async def test_a_fleet_converges_under_a_low_qps(ckc: kclient.Client, cns: str, tmp_path: Path,
                                                 operators: Callable[..., chaos.OperatorProcess]) -> None:
    metrics = ports.free_port()
    op = operators("--kube-api-qps", str(QPS), "--kube-api-burst", str(BURST),
                   "--metrics-bind-address", f"127.0.0.1:{metrics}", "--max-concurrent-updates", "8")
    started = time.monotonic()
    op.start()
    await op.ready()
    fleet = await chaos.create_fleet(ckc, cns, tmp_path, STACKS)
    await chaos.wait_converged(ckc, fleet, 0, timeout=60 + STACKS * 6, diagnostics=op.tail)
    url = f"http://127.0.0.1:{metrics}/metrics"

    async def drained() -> bool:
        samples = await asyncio.to_thread(_metrics, url)
        return _total(samples, "workqueue_depth") == 0 and _total(samples, "controller_runtime_active_workers") == 0

    await eventually(drained, "every work queue drained", 120, interval=0.5)
    elapsed = time.monotonic() - started
    samples = await asyncio.to_thread(_metrics, url)
    requests = _total(samples, "pko_kube_api_rate_limited_requests_total")
    waited = _total(samples, "pko_kube_api_rate_limit_wait_seconds_total")
    print(f"{STACKS} Stacks in {elapsed:.0f}s: {requests:.0f} API requests, {waited:.0f}s waited for tokens")
    assert requests > STACKS, "the limiter saw too few requests: it is not on the operator's client"
    assert requests <= QPS * elapsed + BURST, f"{requests} requests in {elapsed:.0f}s exceed {QPS}/s + {BURST}"
    assert waited > 0, "the limit never paced a request: the test did not exercise it"
    # a 429 for being too many; not the one a watch gets while the API server's cache of a kind is still being
    # filled ("storage is (re)initializing", retried like any transient: a control plane just started, or restarted
    # by an earlier chaos test, answers it for a second or two)
    log = "\n".join(line for line in op.tail(10_000_000).splitlines() if "storage is (re)initializing" not in line)
    for sign in (" 429 ", "TooManyRequests", "Too Many Requests"):
        assert sign not in log
    assert await op.terminate() == 0, op.tail()


async def test_the_lease_is_renewed_while_the_request_budget_is_spent(
    ckc: kclient.Client, cns: str, tmp_path: Path, operators: Callable[..., chaos.OperatorProcess]
) -> None:
    """Leader election under a tight limit: the controllers' requests queue for tokens far longer than the renew
    deadline, yet the leader keeps its Lease — its renewals have a token bucket of their own (as controller-runtime's
    leader election has its own client). Sharing the controllers' bucket, a renewal waited behind their queue, the
    leader lost its Lease, stopped its controllers and started again, over and over (found with 50 workspace pods at
    5 requests a second)."""
    op = operators("--kube-api-qps", "2", "--kube-api-burst", "2", "--leader-elect",
                   "--leader-election-lease-duration", "6s", "--leader-election-renew-deadline", "4s",
                   "--leader-election-retry-period", "1s", "--metrics-bind-address", f"127.0.0.1:{ports.free_port()}")
    op.start()
    await op.ready()
    await eventually(lambda: "leading as" in op.tail(100_000), "the operator to lead", 60)
    fleet = await chaos.create_fleet(ckc, cns, tmp_path, LEASE_STACKS)
    await chaos.wait_converged(ckc, fleet, 0, timeout=600, diagnostics=op.tail)
    log = op.tail(10_000_000)
    assert log.count("leading as") == 1, "the leader lost its Lease while its controllers waited for tokens"
    assert "lost the lease" not in log
    assert await op.terminate() == 0, op.tail()
