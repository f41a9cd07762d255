"""The `pko` command: one entry point that dispatches to the operator, the agent and the tools."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import pko


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pko", description="The Pulumi Kubernetes Operator, in Python.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("version", help="print the version")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "version":
        print(pko.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
