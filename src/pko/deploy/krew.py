"""The krew plugin manifest of `kubectl pko`, written for the archives of a release.

    python -m pko.deploy.krew --uri-base URL ARCHIVE...   the manifest (pko.yaml) on stdout

Each ARCHIVE is a `kubectl-pko_v<version>_<os>_<arch>.tar.gz` that tools/kubectl-pko/build.sh packs (one
self-contained `kubectl-pko` executable at its root); its platform and the version come from its name, its sha256
from its bytes, and its download URI is URL/<its name>, where the release publishes it. That is what a manifest in
the krew index is: one version, one archive per platform, each pinned by its checksum. Why generated, not committed:
the checksum belongs to one build of one release, and a manifest whose checksum matches no archive installs
nothing. `tests/e2e/test_kubectl_krew.py` installs a built archive with this manifest through the real krew.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

NAME = "pko"
BIN = "kubectl-pko"
_ARCHIVE = re.compile(r"^kubectl-pko_(?P<version>v\d+\.\d+\.\d+(?:[-+][\w.-]+)?)_(?P<os>[a-z]+)_(?P<arch>[a-z0-9]+)"
                      r"\.tar\.gz$")
SHORT = "Operate Stacks of the Pulumi Kubernetes Operator"
DESCRIPTION = """\
Shows the state of every Pulumi Stack in a namespace or the cluster (Ready, Reconciling, Stalled, Suspended, the
last update, failures and the next retry), describes one Stack with its conditions, Updates and events, prints the
Pulumi CLI output of its update, requests a retry, and suspends or resumes Stacks. It works with the Stacks of the
Go Pulumi Kubernetes Operator v2 too, except suspend, which only pko honours.
"""


class ArchiveNameError(ValueError):
    """An archive whose name is not `kubectl-pko_v<version>_<os>_<arch>.tar.gz`."""


@dataclasses.dataclass(frozen=True)
class Archive:
    """One platform's archive: where krew downloads it, and its checksum."""

    version: str
    os: str
    arch: str
    uri: str
    sha256: str


def archive(path: Path, uri_base: str) -> Archive:
    """The :class:`Archive` of a built file, published at `uri_base`/<its name>."""
    match = _ARCHIVE.match(path.name)
    if match is None:
        raise ArchiveNameError(f"{path.name}: not an archive name kubectl-pko_v<version>_<os>_<arch>.tar.gz")
    return Archive(match["version"], match["os"], match["arch"], f"{uri_base.rstrip('/')}/{path.name}",
                   hashlib.sha256(path.read_bytes()).hexdigest())


def manifest(archives: Sequence[Archive]) -> dict[str, Any]:
    """The Plugin object: one version, one platform per archive (all of the same version, no platform twice)."""
    versions = {a.version for a in archives}
    if len(versions) != 1:
        raise ValueError(f"a manifest is one version; the archives have {sorted(versions) or 'none'}")
    platforms = [(a.os, a.arch) for a in archives]
    if len(set(platforms)) != len(platforms):
        raise ValueError(f"one archive per platform: {platforms}")
    return {
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
        "kind": "Plugin",
        "metadata": {"name": NAME},
        "spec": {
            "version": versions.pop(),
            "shortDescription": SHORT,
            "description": DESCRIPTION,
            "caveats": "It reads Stacks, Workspaces, Updates, pods, their logs and events with your kubeconfig's\n"
                       "credentials, and writes only a Stack's reconciliation-request annotation and spec.suspend.\n",
            "platforms": [{
                "selector": {"matchLabels": {"os": a.os, "arch": a.arch}},
                "uri": a.uri,
                "sha256": a.sha256,
                "files": [{"from": BIN, "to": "."}],
                "bin": BIN,
            } for a in sorted(archives, key=lambda a: (a.os, a.arch))],
        },
    }


def render(archives: Sequence[Archive]) -> str:
    return yaml.safe_dump(manifest(archives), sort_keys=False, width=120)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pko.deploy.krew", description=SHORT + ": the krew manifest")
    parser.add_argument("--uri-base", required=True, help="where the release publishes the archives")
    parser.add_argument("archives", nargs="+", type=Path, help="kubectl-pko_v<version>_<os>_<arch>.tar.gz files")
    args = parser.parse_args(argv)
    try:
        sys.stdout.write(render([archive(path, args.uri_base) for path in args.archives]))
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
