"""`pko operator`: the manager process, with the Go operator's flags and environment variables where they apply.

It finds its cluster the usual way (in-cluster config, else `--kubeconfig` / `$KUBECONFIG`), registers the
controllers and runs until SIGTERM/SIGINT, then stops in-flight work gracefully (local agents included).
This module only parses settings and wires components; it must never hold reconcile logic.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Sequence
from pathlib import Path

import lightkube

import pko
from pko.cli import logs
from pko.controllers import auto, wiring
from pko.kube import client as kclient
from pko.runtime import leaderelection, manager

log = logging.getLogger("pko.operator")


def _go_duration(text: str) -> float:
    from pko.api import durations

    return durations.parse(text)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pko operator", description="Run the Pulumi Kubernetes Operator (pko).")
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="kubeconfig (default: in-cluster)")
    p.add_argument("--metrics-bind-address", default="0", help='address of /metrics ("0" turns it off)')
    p.add_argument("--health-probe-bind-address", default=":8081", help="address of /healthz and /readyz")
    p.add_argument("--leader-elect", action="store_true", help="elect a leader among replicas (Lease)")
    p.add_argument("--metrics-secure", default="true", help="accepted for compatibility; metrics are served over HTTP")
    p.add_argument("--enable-http2", default="false", help="accepted for compatibility")
    p.add_argument("--program-fs-addr", default=os.environ.get("PROGRAM_FS_ADDR", ":9090"),
                   help="address the Program file server listens on")
    p.add_argument("--program-fs-adv-addr", default=os.environ.get("PROGRAM_FS_ADV_ADDR"),
                   help="address workspaces use to reach the Program file server")
    p.add_argument("--leader-election-lease-duration", type=_go_duration,
                   default=os.environ.get("LEADER_ELECTION_LEASE_DURATION", "60s"))
    p.add_argument("--leader-election-renew-deadline", type=_go_duration,
                   default=os.environ.get("LEADER_ELECTION_RENEW_DEADLINE", "45s"))
    p.add_argument("--leader-election-retry-period", type=_go_duration,
                   default=os.environ.get("LEADER_ELECTION_RETRY_PERIOD", "10s"))
    p.add_argument("--kube-api-timeout", type=_go_duration, default=os.environ.get("KUBE_API_TIMEOUT", "30s"))
    p.add_argument("--zap-log-level", default="info", help="debug, info, error (or a number)")
    p.add_argument("--zap-encoder", default="console", choices=["console", "json"])
    p.add_argument("--zap-time-encoding", default="iso8601")
    p.add_argument("--zap-devel", action="store_true")
    p.add_argument("--workspace-runtime", choices=["pod", "local"], default=os.environ.get("WORKSPACE_RUNTIME", "pod"),
                   help="run workspace agents in pods (default) or as local processes (no kubelet needed)")
    p.add_argument("--workspace-root", type=Path, default=Path(os.environ.get("WORKSPACE_ROOT", ".pko/workspaces")),
                   help="where the local runtime keeps workspaces")
    p.add_argument("--max-concurrent-reconciles", type=int,
                   default=int(os.environ.get("MAX_CONCURRENT_RECONCILES", "25")))
    p.add_argument("--retry-max-backoff", type=_go_duration,
                   default=os.environ.get("RETRY_MAX_BACKOFF_DURATION", "24h"),
                   help="operator-wide cap of the failed-update backoff (10s·3ⁿ); a Stack's "
                        "retryMaxBackoffDurationSeconds overrides it")
    p.add_argument("--max-concurrent-updates", type=int,
                   default=int(os.environ.get("MAX_CONCURRENT_UPDATES", "200")),
                   help="Pulumi operations in flight at once (they do not hold reconcile workers)")
    return p


def _log_level(text: str) -> int:
    if text.lstrip("-").isdigit():
        return logging.DEBUG if int(text) > 0 or int(text) < 0 else logging.INFO
    return {"debug": logging.DEBUG, "info": logging.INFO, "error": logging.ERROR}.get(text, logging.INFO)


def _config(kubeconfig: str | None) -> object:
    if kubeconfig:
        return lightkube.KubeConfig.from_file(kubeconfig)
    return lightkube.KubeConfig.from_env()


async def run(args: argparse.Namespace) -> int:
    config = _config(args.kubeconfig)
    client = kclient.Client.connect(config, timeout=args.kube_api_timeout)
    namespace = os.environ.get("POD_NAMESPACE") or "pulumi-kubernetes-operator"
    election = None
    if args.leader_elect:
        election = manager.LeaderElection(namespace=namespace, timing=leaderelection.Timing(
            args.leader_election_lease_duration, args.leader_election_renew_deadline,
            args.leader_election_retry_period))
    mgr = manager.Manager(client, leader_election=election, health_address=args.health_probe_bind_address,
                          metrics_address=args.metrics_bind_address)
    settings = auto.Settings(
        version=f"v{pko.__version__}",
        workspace_runtime=args.workspace_runtime,
        workspace_root=args.workspace_root.resolve(),
        kubeconfig=str(Path(args.kubeconfig).resolve()) if args.kubeconfig else None,
        agent_image=os.environ.get("AGENT_IMAGE"),
        agent_image_pull_policy=os.environ.get("AGENT_IMAGE_PULL_POLICY"),
        flux_max_untar=os.environ.get("FLUX_MAX_UNTAR_SIZE_BYTES"),
        workers=args.max_concurrent_reconciles,
        max_operations=args.max_concurrent_updates,
        workspace_localhost=os.environ.get("WORKSPACE_LOCALHOST"),
        program_fs_addr=args.program_fs_addr,
        program_fs_adv_addr=args.program_fs_adv_addr,
        retry_max_backoff=args.retry_max_backoff,
    )
    controllers = wiring.setup(mgr, client, settings)
    task = asyncio.create_task(controllers.run(), name="operator")
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    log.info("pko operator %s started (workspace runtime: %s)", pko.__version__, settings.workspace_runtime)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    finally:
        await client.close()
    log.info("pko operator stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.configure(_log_level(args.zap_log_level), json_lines=args.zap_encoder == "json")
    return asyncio.run(run(args))
