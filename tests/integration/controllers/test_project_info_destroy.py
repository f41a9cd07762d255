"""The source-free workspace of a destroy (PKO#1299, fixed in the Go operator's 2.9.1): when a Stack is deleted
with `destroyOnFinalize` and `runProgram` off, the Stack controller builds a Workspace from `projectInfo` alone (a
project file naming the runtime, no program). Installing for that runtime there fails (no `package.json` for
Node.js, no `go.mod` for Go, or no language host at all), and in the Go operator before 2.9.1 that stalled the
Workspace, so the destroy never ran and the resources were stranded. pko runs no install there: the Workspace is
Ready and the destroy succeeds.

Real API server, the operator on the `local` runtime, the real Pulumi CLI and backend. The stack's state is made by
a real `up` of a YAML project; the destroy's workspace names the `nodejs` runtime, whose language host this test
bed does not have, so `pulumi install` there fails as it would for a Node.js program without its sources.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

from pko.kube import client as kclient
from pko.kube import objects, owners, resources
from pko.testing import operator
from pko.testing.waiting import condition, wait_for

PROJECT = "stranded"


async def _cli(env: dict[str, str], cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The real CLI, off the event loop the in-process operator runs on."""
    return await asyncio.to_thread(subprocess.run, ["pulumi", *args], cwd=cwd, env=env, capture_output=True,
                                   text=True, check=check, timeout=120)


async def test_a_destroy_from_project_info_installs_nothing_and_runs(
    kc: kclient.Client, namespace: str, running_operator: operator.Operator, pulumi_env: dict[str, str],
    tmp_path: Path,
) -> None:
    program = tmp_path / "program"
    program.mkdir()
    (program / "Pulumi.yaml").write_text(f"name: {PROJECT}\nruntime: yaml\noutputs:\n  greeting: hello\n")
    await _cli(pulumi_env, program, "stack", "init", "dev")
    await _cli(pulumi_env, program, "up", "--yes", "--stack", "dev")
    info = tmp_path / "info"
    info.mkdir()
    (info / "Pulumi.yaml").write_text(f"name: {PROJECT}\nruntime: nodejs\n")
    refused = await _cli(pulumi_env, info, "install", check=False)
    assert refused.returncode != 0, "the premise: installing for this runtime fails here"

    ws = await kc.create(resources.WORKSPACE.new("destroy", namespace, spec={
        "projectInfo": {"name": PROJECT, "runtime": "nodejs"},
        "stacks": [{"name": "dev", "create": False}],
    }))
    ready = await wait_for(kc, resources.WORKSPACE, "destroy", namespace,
                           lambda o: condition(o, "Ready").get("status") == "True"
                           or condition(o, "Stalled").get("status") == "True", timeout=120)
    assert condition(ready, "Stalled").get("status") != "True", ready["status"]
    assert condition(ready, "Ready")["reason"] == "Succeeded"

    update = owners.set_controller_reference(resources.UPDATE.new("destroy-1", namespace, spec={
        "workspaceName": "destroy", "stackName": "dev", "type": "destroy", "ttlAfterCompleted": "1h"}), ws)
    await kc.create(update)
    done = await wait_for(kc, resources.UPDATE, "destroy-1", namespace,
                          lambda o: condition(o, "Complete").get("status") == "True", timeout=180)
    assert condition(done, "Failed")["status"] == "False", done["status"]
    history = json.loads((await _cli(pulumi_env, program, "stack", "history", "--json", "--stack", "dev")).stdout)
    assert history[0]["kind"] == "destroy", history[0]
    assert history[0]["result"] == "succeeded", history[0]
    assert objects.name_of(done) == "destroy-1"
