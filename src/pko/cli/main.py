"""The `pko` command: one entry point that dispatches to the operator, the agent and the tools.

Subcommands own their own argument parsing (`pko agent ...` must accept the Go agent's flags verbatim), so this
module only picks the subcommand and hands it the rest of the command line.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import pko

USAGE = """usage: pko <command> [args]

commands:
  operator   run the operator (controllers, Program file server)
  agent      the workspace agent: serve | init | version
  crds       print the CustomResourceDefinitions
  dev        run everything locally: control plane, operator, an example Stack
  ctl        operate Stacks: get | retry | suspend | resume | describe | logs (also `kubectl pko`)
  version    print the version
"""


def _operator(argv: Sequence[str]) -> int:
    from pko.cli import operator

    return operator.main(argv)


def _agent(argv: Sequence[str]) -> int:
    from pko.cli import agent

    return agent.main(argv)


def _crds(argv: Sequence[str]) -> int:
    from pko.cli import crds

    return crds.main(argv)


def _dev(argv: Sequence[str]) -> int:
    from pko.cli import dev

    return dev.main(argv)


def _ctl(argv: Sequence[str]) -> int:
    from pko.cli.ctl import app

    return app.main(argv)


def _version(argv: Sequence[str]) -> int:
    print(pko.__version__)
    return 0


COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "operator": _operator, "agent": _agent, "crds": _crds, "dev": _dev, "ctl": _ctl, "version": _version,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if args else 2
    command = COMMANDS.get(args[0])
    if command is None:
        print(f"pko: unknown command {args[0]!r}\n\n{USAGE}", end="", file=sys.stderr)
        return 2
    return command(args[1:])


if __name__ == "__main__":
    sys.exit(main())
