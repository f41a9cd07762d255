"""The environment the real Pulumi CLI runs in for tests and ``pko dev``: built binaries, no cloud.

State goes to a ``file://`` backend and secrets use a passphrase, so nothing leaves the machine; the CLI never
checks for updates or downloads plugins (a test that would need a download fails instead of hanging).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pko.testing import binaries

TEST_PASSPHRASE = "pko-test-passphrase"


def pulumi_env(root: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment variables for a Pulumi CLI whose home and state live under `root`."""
    binaries.require("pulumi")
    home = root / "pulumi-home"
    state = root / "pulumi-state"
    home.mkdir(parents=True, exist_ok=True)
    state.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ if base is None else base)
    python_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([str(binaries.bin_dir()), python_bin, env.get("PATH", "")])
    env.update(
        PULUMI_HOME=str(home),
        PULUMI_BACKEND_URL=f"file://{state}",
        PULUMI_CONFIG_PASSPHRASE=TEST_PASSPHRASE,
        PULUMI_SKIP_UPDATE_CHECK="true",
        PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
        PULUMI_SKIP_CONFIRMATIONS="true",
    )
    return env
