"""`kubectl pko` as krew users get it: the standalone executable packed into its release archive
(tools/kubectl-pko/build.sh), the manifest written for that archive (`python -m pko.deploy.krew`), checked by krew's
own manifest validator and installed by the real krew (both built from sigs.k8s.io/krew by `make tools`) into a
krew root of the test's own. Then kubectl's plugin lookup finds it in krew's bin directory and it reads the real
control plane with no Python beside it; `krew uninstall` removes it. krew never reaches the network: the archive is
given to it (`--archive`), and its upgrade check is off."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from pko.deploy import krew
from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import binaries, controlplane

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 900  # a cold PyInstaller build on a loaded 2-core machine


@pytest.fixture(scope="module")
def archive() -> Path:
    """The krew archive of the current sources (build.sh reuses a cached build when nothing it packs changed)."""
    build = subprocess.run(["bash", str(ROOT / "tools" / "kubectl-pko" / "build.sh")], capture_output=True,
                           text=True, check=False, timeout=BUILD_TIMEOUT)
    if build.returncode != 0:
        pytest.fail(f"building the standalone kubectl-pko failed:\n{build.stderr[-4000:]}", pytrace=False)
    found = sorted(Path(build.stdout.strip().splitlines()[-1]).glob("kubectl-pko_v*_linux_amd64.tar.gz"))
    assert len(found) == 1, found
    return found[0]


def _run(*args: str | Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], env=env, capture_output=True, text=True, timeout=120, check=False)


async def test_krew_installs_the_archive_and_kubectl_runs_it(
    kc: kclient.Client, namespace: str, cluster: controlplane.ControlPlane, archive: Path, tmp_path: Path,
) -> None:
    manifest = tmp_path / "pko.yaml"  # the validator wants the file named after the plugin
    manifest.write_text(krew.render([krew.archive(archive, "https://example.invalid/pko/releases/download")]))
    # its structural checks (the install it would also try downloads the archive: krew itself installs it below)
    validated = _run(binaries.require("validate-krew-manifest"), "-manifest", manifest, "-skip-install",
                     env=dict(os.environ))
    assert validated.returncode == 0, validated.stderr

    root = tmp_path / "krew"
    # only krew's bin directory and the system's basic tools: no venv, no pip-installed console script
    env = {"HOME": str(tmp_path), "KREW_ROOT": str(root), "KREW_NO_UPGRADE_CHECK": "1",
           "KUBECONFIG": str(cluster.kubeconfig), "PATH": os.pathsep.join([str(root / "bin"), "/usr/bin", "/bin"])}
    # the plugin index krew would clone from GitHub, empty here: `list` and `uninstall` only ask that it exists
    assert _run("git", "init", "-q", root / "index" / "default", env=dict(os.environ)).returncode == 0
    installed = _run(binaries.require("krew"), "install", f"--manifest={manifest}", f"--archive={archive}", env=env)
    assert installed.returncode == 0, (installed.stdout, installed.stderr)
    assert (root / "bin" / "kubectl-pko").is_symlink(), sorted(p.name for p in (root / "bin").iterdir())
    receipt = yaml.safe_load((root / "receipts" / "pko.yaml").read_text())  # krew's record of what it installed
    assert (receipt["metadata"]["name"], receipt["spec"]["version"]) == ("pko", archive.name.split("_")[1])
    listed = _run(binaries.require("krew"), "list", env=env)
    assert listed.stdout.split() == ["detached/pko"], (listed.stdout, listed.stderr)  # from a manifest, no index

    kubectl = binaries.require("kubectl")
    plugins = _run(kubectl, "plugin", "list", env=env)
    assert str(root / "bin" / "kubectl-pko") in plugins.stdout, (plugins.stdout, plugins.stderr)
    await kc.create(resources.STACK.new("from-krew", namespace, spec={"stack": "dev", "projectRepo": "x"}))
    got = _run(kubectl, "pko", "get", "-n", namespace, env=env)
    assert got.returncode == 0, got.stderr
    assert "from-krew" in got.stdout, got.stdout
    missing = _run(kubectl, "pko", "describe", "no-such-stack", "-n", namespace, env=env)
    assert missing.returncode == 1, (missing.stdout, missing.stderr)
    assert "not found" in missing.stderr

    removed = _run(binaries.require("krew"), "uninstall", "pko", env=env)
    assert removed.returncode == 0, removed.stderr
    assert not (root / "bin" / "kubectl-pko").exists()
    assert not (root / "receipts" / "pko.yaml").exists()
