"""Every manifest under examples/ is accepted by the real API server with pko's CRDs (and Flux's) installed:
server-side apply in dry-run mode with strict field validation, so an unknown or misspelt field fails too. pko's
models read every pko object in them."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from pko.api import approval, program, rollout, stack, update, workspace
from pko.testing import binaries, controlplane

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").rglob("*.yaml"))
MODELS: dict[str, Any] = {
    "Stack": stack.Stack, "Program": program.Program, "Workspace": workspace.Workspace, "Update": update.Update,
    "StackApproval": approval.StackApproval, "StackRollout": rollout.StackRollout,
}


def kubectl(cp: controlplane.ControlPlane, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binaries.require("kubectl")), "--kubeconfig", str(cp.kubeconfig), *args],
                          input=stdin, capture_output=True, text=True, timeout=120)


def dry_run(cp: controlplane.ControlPlane, text: str) -> subprocess.CompletedProcess[str]:
    return kubectl(cp, "apply", "--server-side", "--dry-run=server", "--validate=strict",
                   "--field-manager=examples", "-f", "-", stdin=text)


@pytest.fixture(scope="module")
def with_flux_crds(cluster: controlplane.ControlPlane) -> controlplane.ControlPlane:
    """The session control plane with pko's CRDs (fixture `cluster`) and Flux's source CRDs."""
    crd_dir = (binaries.bin_dir() / "flux-crds").resolve()  # kubectl reads a symlinked directory as a file
    assert crd_dir.is_dir(), f"{crd_dir} is missing: run `make tools` (it builds source-controller and its CRDs)"
    done = kubectl(cluster, "apply", "--server-side", "--force-conflicts", "--field-manager=examples-flux",
                   "-f", str(crd_dir))
    assert done.returncode == 0, done.stderr
    # kubectl wait fails at once, instead of waiting, on a CRD the API server has not given any condition yet
    # (".status.conditions accessor error: <nil>"): asked again until each has them (a CI run lost the module to it)
    deadline = time.monotonic() + 60
    while True:
        done = kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s", "-f", str(crd_dir))
        if done.returncode == 0 or "accessor error" not in done.stderr or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert done.returncode == 0, done.stderr
    return cluster


def test_examples_cover_the_documented_cases() -> None:
    docs = [d for path in EXAMPLES for d in yaml.safe_load_all(path.read_text()) if d]
    stacks = [d["spec"] for d in docs if d["kind"] == "Stack"]
    assert any("projectRepo" in s for s in stacks), "git source"
    assert any("gitAuth" in s for s in stacks), "private git source"
    assert any("fluxSource" in s for s in stacks), "Flux source"
    assert any("programRef" in s for s in stacks), "Program source"
    assert any("workspaceTemplate" in s for s in stacks), "custom workspace"
    assert any("configRef" in s and any(isinstance(v, dict | list) for v in (s.get("config") or {}).values())
               for s in stacks), "structured config"
    assert any(s.get("preview") is True for s in stacks), "preview"
    assert any(s.get("suspend") is True for s in stacks), "suspend (pko)"
    assert any(s.get("retryPolicy") for s in stacks), "failure policy (pko)"
    assert any((s.get("approval") or {}).get("required") for s in stacks), "approvals (pko)"
    assert "StackApproval" in {d["kind"] for d in docs}, "approvals (pko)"
    assert any((s.get("destroyProtection") or {}).get("enabled") for s in stacks), "destroy protection (pko)"
    assert any(s.get("workspaceIdleTimeout") for s in stacks), "scale to zero (pko)"
    assert any((s.get("outputs") or {}).get("template") for s in stacks), "outputs to a Secret / ConfigMap (pko)"
    assert {"Program", "Workspace", "Update", "GitRepository", "Pod"} <= {d["kind"] for d in docs}
    assert any(s.get("driftDetection") for s in stacks), "drift detection (pko)"
    assert {"Program", "Workspace", "Update", "GitRepository"} <= {d["kind"] for d in docs}


@pytest.mark.parametrize("path", EXAMPLES, ids=[str(p.relative_to(ROOT / "examples")) for p in EXAMPLES])
def test_example_is_accepted_by_the_api_server(with_flux_crds: controlplane.ControlPlane, path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs, f"{path} holds no manifest"
    done = dry_run(with_flux_crds, path.read_text())
    assert done.returncode == 0, f"{path}:\n{done.stderr}"
    applied = [line for line in done.stdout.splitlines() if line.endswith("serverside-applied (server dry run)")]
    assert len(applied) == len(docs), done.stdout
    for doc in docs:
        if doc["kind"] in MODELS:
            MODELS[doc["kind"]].model_validate(doc)


def test_a_misspelt_field_is_rejected(with_flux_crds: controlplane.ControlPlane) -> None:
    """The check above can fail: strict validation refuses a field the CRD does not have."""
    doc = yaml.safe_load((ROOT / "examples" / "preview" / "stack.yaml").read_text())
    doc["spec"]["previewOnly"] = doc["spec"].pop("preview")
    done = dry_run(with_flux_crds, yaml.safe_dump(doc))
    assert done.returncode != 0
    assert ".spec.previewOnly: field not declared in schema" in done.stderr
