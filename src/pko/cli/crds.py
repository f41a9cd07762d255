"""``pko crds``: print the four CustomResourceDefinitions (or write them as the files under ``deploy/crds/``).

Why: installing pko starts with ``pko crds | kubectl apply --server-side -f -``, and ``deploy/crds/`` is
regenerated with ``pko crds --output-dir deploy/crds`` after a model change (a test fails until it is).

Must never: build manifests itself — they come from :mod:`pko.api.crds`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pko.api import crds


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Add the ``crds`` options to `parser` (a sub-command parser of ``pko``), or make a standalone parser."""
    parser = parser or argparse.ArgumentParser(prog="pko crds", description="Print the pko CRDs.")
    parser.add_argument("--output-dir", type=Path, default=None,
                        help="write one file per CRD into this directory instead of printing them")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Run with options parsed by :func:`build_parser`."""
    if args.output_dir is None:
        sys.stdout.write(crds.render_all())
        return 0
    output_dir: Path = args.output_dir
    output_dir.mkdir(parents=True, exist_ok=True)
    for file_name, manifest in crds.all_crds().items():
        (output_dir / file_name).write_text(crds.render(manifest), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
