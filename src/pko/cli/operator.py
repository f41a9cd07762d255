"""`pko operator`: the manager process, with the Go operator's flags and environment variables where they apply.

It finds its cluster the usual way (in-cluster config, else `--kubeconfig` / `$KUBECONFIG`), registers the
controllers and runs until SIGTERM/SIGINT, then stops in-flight work gracefully (local agents included).
The flags, their variables and defaults are declared in :mod:`pko.controllers.settings`; this module only turns
them into components and runs them. It must never hold reconcile logic.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import signal
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, Metric

import pko
from pko.cli import logs
from pko.controllers import settings as operator_settings
from pko.controllers import wiring
from pko.kube import client as kclient
from pko.kube import ratelimit
from pko.runtime import eventloop, heap, leaderelection, manager, sharding

log = logging.getLogger("pko.operator")


def build_parser() -> argparse.ArgumentParser:
    return operator_settings.parser()


def _log_level(text: str) -> int:
    if text.lstrip("-").isdigit():
        return logging.DEBUG if int(text) > 0 or int(text) < 0 else logging.INFO
    return {"debug": logging.DEBUG, "info": logging.INFO, "error": logging.ERROR}.get(text, logging.INFO)


def user_agent(settings: operator_settings.Settings) -> str:
    """The operator's User-Agent: its version, and its shard when it has one (the API server's audit log then says
    which shard sent each request)."""
    shard = settings.shard
    return f"pko/{pko.__version__}" + (f" (shard {shard.name})" if shard.name else
                                       "" if shard.everything else f" (selector {shard.text})")


def _client(settings: operator_settings.Settings) -> kclient.Client:
    """A client of the operator's API server with its own ``--kube-api-qps``/``--kube-api-burst`` token bucket."""
    burst = settings.kube_api_burst or math.ceil(settings.kube_api_qps)
    return kclient.Client.from_kubeconfig(settings.kubeconfig, timeout=settings.kube_api_timeout,
                                          limiter=ratelimit.TokenBucket(settings.kube_api_qps, burst),
                                          user_agent=user_agent(settings))


async def run(settings: operator_settings.Settings) -> int:
    client = _client(settings)
    limiter = client.limiter
    election = None
    if settings.leader_elect:
        # The Lease's renewals have a client and a budget of their own (see manager.LeaderElection).
        election = manager.LeaderElection(
            namespace=settings.operator_namespace, name=settings.shard.lease_name(leaderelection.DEFAULT_LEASE_NAME),
            timing=leaderelection.Timing(settings.lease_duration, settings.renew_deadline, settings.retry_period),
            client=_client(settings))
    mgr = manager.Manager(client, leader_election=election, health_address=settings.health_address,
                          metrics_address=settings.metrics_address)
    if limiter is not None:
        mgr.registry.register(_LimiterMetrics(limiter))
    controllers = wiring.setup(mgr, client, settings)
    frozen = heap.settle()  # what the start made is never garbage: the collector stops scanning it (heap.py)
    task = asyncio.create_task(controllers.run(), name="operator")
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    log.info("pko operator %s started (workspace runtime: %s; event loop: %s; %d objects of the start frozen; "
             "reconciling %s)", pko.__version__, settings.workspace_runtime, eventloop.name_of(loop), frozen,
             settings.shard.describe())
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    finally:
        await client.close()
        if election is not None and election.client is not None:
            await election.client.close()
    log.info("pko operator stopped")
    return 0


class _LimiterMetrics:
    """`--kube-api-qps` at work on /metrics: the requests the token bucket let through and the seconds they waited
    (a steadily growing wait says the limit, not the API server, paces the operator)."""

    def __init__(self, limiter: ratelimit.TokenBucket) -> None:
        self.limiter = limiter

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily("pko_kube_api_rate_limited_requests", "API requests through the client-side "
                                  "rate limiter", value=self.limiter.granted)
        yield CounterMetricFamily("pko_kube_api_rate_limit_wait_seconds", "seconds API requests waited for the "
                                  "client-side rate limiter", value=self.limiter.waited)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    settings = operator_settings.from_args(args, version=f"v{pko.__version__}")
    try:
        settings.shard  # noqa: B018 (checks that the sharding flags agree)
    except sharding.ShardError as err:
        parser.error(str(err))
    try:
        eventloop.chosen()
    except eventloop.EventLoopError as err:
        parser.error(str(err))
    logs.configure(_log_level(settings.log_level), json_lines=settings.log_encoder == "json")
    return eventloop.run(run(settings))
