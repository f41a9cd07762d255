"""``pko agent serve|init|version``: the workspace agent's command line, flag for flag the reference agent's.

The operator starts the agent in the workspace pod as ``/share/agent -- serve --workspace ... --auth-mode kube ...``
(via tini, which passes the ``--`` through) and initializes the workspace with ``/share/agent init -t ...``; so the
same flags, defaults and environment variables (``WORKSPACE_NAMESPACE``, ``WORKSPACE_NAME``, ``GIT_*``, ...) are
accepted here, and root flags (``-v``, ``--kubeconfig``, ``--context``) may come before or after the subcommand.

This module only parses arguments and sets up logging; it must never hold agent logic. It imports each command's
module only when that command runs: every workspace pod execs the agent for ``init`` and for ``serve``, and neither
should pay for the other's imports (``serve`` loads gRPC, ``init`` loads git and HTTP clients; ``version`` neither).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence

import pko
from pko.agent import lifeline

AUTH_NONE = "none"  # servecmd.AUTH_NONE, spelled here so that parsing the flags imports no command


def _root_flags(parser: argparse.ArgumentParser, suppress: bool) -> None:
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS if suppress else False,
                        help="enable verbose logging")
    parser.add_argument("--kubeconfig", default=default, help="path to a kubeconfig file")
    parser.add_argument("--context", default=default, help="the kubeconfig context to use")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agent", description="Pulumi Kubernetes Operator workspace agent (pko).")
    _root_flags(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve the agent RPC service")
    _root_flags(serve, suppress=True)
    serve.add_argument("-w", "--workspace", required=True, help="the workspace directory to serve")
    serve.add_argument("--skip-install", action="store_true", help="skip installation of project dependencies")
    serve.add_argument("-s", "--stack", default="", help="select (or create) the stack to use")
    serve.add_argument("--secrets-provider", default="", help="the secrets provider to use when creating the stack")
    serve.add_argument("--env-file", default="", help="an environment file to load (e.g. .env)")
    serve.add_argument("--host", default="0.0.0.0", help="server bind address")
    serve.add_argument("--port", type=int, default=50051, help="server port")
    serve.add_argument("--auth-mode", default=AUTH_NONE, help="authorization mode (none, kube)")
    serve.add_argument("--kube-audience", action="append", default=[], dest="kube_audiences",
                       help="the audience to expect in the token (kube auth mode; repeatable)")
    serve.add_argument("--kube-workspace-namespace", default=os.environ.get("WORKSPACE_NAMESPACE", ""),
                       help="the Workspace object namespace (kube auth mode)")
    serve.add_argument("--kube-workspace-name", default=os.environ.get("WORKSPACE_NAME", ""),
                       help="the Workspace object name (kube auth mode)")
    serve.add_argument("--pulumi-log-level", type=int, default=0, help="the log level for the Pulumi CLI")
    serve.add_argument("--fetch-from-stdin", action="store_true",
                       help="pko: first fetch the source as `init` does, from a JSON request on stdin (the local "
                            "runtime)")
    serve.add_argument("--ready-fd", type=int, default=None,
                       help="pko: a pipe to write `fetched` and `listening` lines to as each happens (the local "
                            "runtime)")

    init = commands.add_parser("init", help="initialize a Pulumi workspace")
    _root_flags(init, suppress=True)
    init.add_argument("-t", "--target-dir", default="", help="the target directory to initialize")
    init.add_argument("--flux-url", default="", help="Flux archive URL")
    init.add_argument("--flux-digest", default="", help="Flux digest")
    init.add_argument("--git-url", default="", help="Git repository URL")
    init.add_argument("--git-revision", default="", help="Git revision (tag or commit SHA)")
    init.add_argument("--project-name", default="", help="project name (writes Pulumi.yaml)")
    init.add_argument("--project-runtime", default="", help="project runtime (writes Pulumi.yaml)")

    version = commands.add_parser("version", help="print the version")
    _root_flags(version, suppress=True)
    return parser


def _normalize(argv: Sequence[str]) -> list[str]:
    """Drop a ``--`` that comes before the subcommand (``agent -- serve ...``, as tini passes it)."""
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "--":
            return args[:i] + args[i + 1:]
        if not arg.startswith("-"):
            break
    return args


#: The reference agent's switch (its PR#1306) for JSON log lines, which log pipelines (ELK, OpenSearch) read as is.
JSON_LOG_ENV = "AGENT_JSON_LOG"


def json_log_requested(environ: Mapping[str, str]) -> bool:
    """Whether the agent's environment (the Workspace's `env`, the pod template's, the operator's for `local`)
    asks for JSON log lines: ``AGENT_JSON_LOG`` set to true (``true``, ``1``, ``yes``; any case)."""
    return environ.get(JSON_LOG_ENV, "").strip().lower() in {"true", "1", "yes"}


def _setup_logging(verbose: bool) -> None:
    level = logging.DEBUG if verbose else logging.INFO
    if json_log_requested(os.environ):
        from pko.cli import logs  # structlog's renderer, loaded only when asked for: the agent starts on every pod

        logs.configure(level, json_lines=True)
        return
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(_normalize(sys.argv[1:] if argv is None else argv))
    lifeline.hold()
    _setup_logging(bool(args.verbose))
    log = logging.getLogger("pko.agent")
    if args.command == "version":
        print(pko.__version__)
        return 0
    if args.command == "init":
        from pko.agent import initcmd, termination

        options = initcmd.InitOptions(args.target_dir, args.git_url, args.git_revision, args.flux_url,
                                      args.flux_digest, args.project_name, args.project_runtime)
        try:
            initcmd.run(options, os.environ)
        except initcmd.InitError as err:
            log.error("%s", err)
            termination.report_failure(str(err))
            return 1
        return 0
    import asyncio

    from pko.agent import servecmd, termination

    fetch = None
    if args.fetch_from_stdin:
        from pko.protocol.fetchrequest import FetchRequest

        try:
            fetch = FetchRequest.from_json(sys.stdin.read())
        except ValueError as err:
            log.error("%s", err)
            return 1
    serve = servecmd.ServeOptions(
        workspace=args.workspace, skip_install=args.skip_install, stack=args.stack,
        secrets_provider=args.secrets_provider, env_file=args.env_file, host=args.host, port=args.port,
        auth_mode=args.auth_mode, kube_audiences=list(args.kube_audiences),
        kube_workspace_namespace=args.kube_workspace_namespace, kube_workspace_name=args.kube_workspace_name,
        pulumi_log_level=args.pulumi_log_level, kubeconfig=args.kubeconfig or "", context=args.context or "",
        fetch=fetch, ready_fd=args.ready_fd,
    )
    log.info("Pulumi Kubernetes Agent (pko %s)", pko.__version__)
    try:
        asyncio.run(servecmd.run(serve))
    except servecmd.ServeError as err:
        log.error("%s", err)
        # in a pod, the Workspace's status quotes it (an install that fails restarts the container, with back-off)
        termination.report_failure(str(err))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
