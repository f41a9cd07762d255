"""Where the real binaries live, and a loud failure when one is missing.

`make tools` builds kube-apiserver, etcd, kubectl, the Pulumi CLI and its language hosts into a cache outside
the repository (``$PKO_BIN_DIR``, default ``~/.cache/pko/bin``). Tests and ``pko dev`` find them here; they never
fall back to whatever happens to be on ``PATH``, so a test never runs against a binary we did not build.
"""

from __future__ import annotations

import os
from pathlib import Path


class MissingBinaryError(RuntimeError):
    """A binary the test bed needs is not in the bin directory."""


def bin_dir() -> Path:
    """The directory `make tools` fills (its last line of output)."""
    configured = os.environ.get("PKO_BIN_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "pko" / "bin"


def require(name: str) -> Path:
    """The path of binary `name`, or an error that says how to build it."""
    path = bin_dir() / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise MissingBinaryError(
            f"{name} not found in {bin_dir()}: run `make tools` (or set PKO_BIN_DIR to where it was built)"
        )
    return path
