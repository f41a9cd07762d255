"""A backend's passing error is retried, not final (docs/reliability.md, "A backend shared by a fleet"): during a
workspace's start, and during an update, even for a Stack whose retry policy stalls at the first failure.

The real Pulumi CLI, behind a wrapper that answers the first two `pulumi stack select` (or `pulumi up`) of the
test with the error a shared backend gave 200 Stacks (`error: EOF`) and otherwise runs the CLI itself: the
Workspace says it is retrying (not Stalled), or the failed Updates are retried, and the Stack reaches Ready at its
first generation with no one touching it.
"""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest
import stack_e2e as e2e

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import operator
from pko.testing.waiting import condition, wait_for

PASSPHRASE = {"type": "Literal", "literal": {"value": "e2e-passphrase"}}
FAILURES = 2


def _wrap(tmp_path: Path, pulumi_env: dict[str, str], command: str) -> Path:
    """Puts first on the agents' PATH a `pulumi` whose first FAILURES `command` calls fail as a backend's EOF does;
    returns the directory whose files count the injected failures."""
    real = shutil.which("pulumi", path=pulumi_env["PATH"])
    assert real is not None, "the real Pulumi CLI is not on the test environment's PATH"
    bindir = tmp_path / "hiccup-bin"
    bindir.mkdir()
    script = bindir / "pulumi"
    script.write_text(f"""#!/bin/sh
if [ "$1 $2" = "{command}" ] || [ "$1" = "{command}" ]; then
  n=$(ls {bindir}/failed.* 2>/dev/null | wc -l)
  if [ "$n" -lt {FAILURES} ]; then
    touch {bindir}/failed.$n
    echo "error: EOF" >&2
    exit 255
  fi
fi
exec {real} "$@"
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    pulumi_env["PATH"] = f"{bindir}:{pulumi_env['PATH']}"  # the operator fixture exports this environment
    return bindir


@pytest.fixture
def hiccup_cli(tmp_path: Path, pulumi_env: dict[str, str]) -> Path:
    return _wrap(tmp_path, pulumi_env, "stack select")


@pytest.fixture
def hiccup_up(tmp_path: Path, pulumi_env: dict[str, str]) -> Path:
    return _wrap(tmp_path, pulumi_env, "up")


async def _program_stack(kc: kclient.Client, namespace: str, tmp_path: Path, **spec: object) -> None:
    """A one-output Program and its Stack "hiccup" on a file backend of its own."""
    await kc.create(resources.PROGRAM.new("hiccup", namespace, program={"outputs": {"greeting": "hello"}}))
    backend = tmp_path / "state"
    backend.mkdir()
    await kc.create(resources.STACK.new("hiccup", namespace, spec={
        "stack": "dev", "programRef": {"name": "hiccup"}, "backend": f"file://{backend}",
        "envRefs": {"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE}, **spec,
    }))


async def test_a_backend_eof_at_workspace_start_is_retried_until_ready(
    kc: kclient.Client, namespace: str, hiccup_cli: Path, running_operator: operator.Operator, tmp_path: Path,
) -> None:
    await _program_stack(kc, namespace, tmp_path)

    stack = await wait_for(kc, resources.STACK, "hiccup", namespace, e2e.is_ready, timeout=120)
    assert len(list(hiccup_cli.glob("failed.*"))) == FAILURES, "the fault was not injected"
    assert stack["status"]["lastUpdate"]["state"] == "succeeded"
    assert stack["status"]["outputs"] == {"greeting": "hello"}
    assert e2e.reason(stack, "Stalled") is None

    workspace = await kc.get(resources.WORKSPACE, "hiccup", namespace)
    assert condition(workspace, "Ready").get("status") == "True"
    assert e2e.reason(workspace, "Stalled") is None
    retried = [e["message"] for e in await e2e.events_with(kc, "hiccup", namespace, "StackInitializationFailure",
                                                           kind="Workspace")]
    assert all("error: EOF" in m and "retrying with backoff" in m for m in retried), retried


async def test_a_backend_eof_during_an_update_never_stalls_the_stack(
    kc: kclient.Client, namespace: str, hiccup_up: Path, running_operator: operator.Operator, tmp_path: Path,
) -> None:
    # a policy that stalls at the first failure, retrying after 1 s: only a passing failure gets past it
    await _program_stack(kc, namespace, tmp_path,
                         retryPolicy={"maxFailures": 0, "backoffBaseSeconds": 1, "backoffFactor": 1})

    stack = await wait_for(kc, resources.STACK, "hiccup", namespace, e2e.is_ready, timeout=120)
    assert len(list(hiccup_up.glob("failed.*"))) == FAILURES, "the fault was not injected"
    assert stack["status"]["outputs"] == {"greeting": "hello"}
    ups = [u for u in await e2e.updates_of(kc, "hiccup", namespace) if u["spec"]["type"] == "up"]
    failed = [u for u in ups if condition(u, "Failed").get("status") == "True"]
    assert len(failed) == FAILURES, [u["status"] for u in ups]
    assert all("EOF" in (u["status"].get("message") or "") for u in failed)
