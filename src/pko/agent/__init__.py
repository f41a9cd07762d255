"""The workspace agent: the ``agent.AutomationService`` gRPC server, its auth, and ``agent init``.

Wire-compatible with the Go agent of the Pulumi Kubernetes Operator v2.9: the contract itself (``agent.proto``,
its generated code, the error-detail trailer) is :mod:`pko.protocol`, shared with the operator; this package is
the server side only and never imports the operator's controllers. Map of the package:

- ``service`` — the RPCs; ``workspace`` — the project directory and the CLI commands run there; ``pulumicmd`` — the
  async, interruptible CLI runner; ``eventlog`` — engine events from ``--event-log``; ``cliargs``, ``config``,
  ``results``, ``errors``, ``gojson``, ``envfile`` — pure translation between the protocol and the CLI.
- ``auth`` — ``--auth-mode kube``; ``grpcserver`` — server, interceptor, graceful shutdown.
- ``servecmd`` / ``initcmd`` — the two commands (``pko.cli.agent`` parses their flags).
"""
