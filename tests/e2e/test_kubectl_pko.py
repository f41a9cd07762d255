"""`kubectl pko`, end to end: the installed `kubectl-pko` console script run as a subprocess with a kubeconfig,
against the real control plane and the operator running Stacks from the loopback git server.

One fleet: a Ready Stack, a Stack Stalled at its first failure, and one backing off for an hour. `get` shows each
state, failure count and next retry (the controller's backoff); `retry --all-stalled` annotates only the Stalled
one and the operator re-runs it; `suspend -l` / `resume -l` round-trip `spec.suspend` and `get` shows it;
`describe` and `logs` show conditions, Updates, events and the failed Update's output. Bad input fails with the
API server's message or `stack NS/NAME not found`, exit code 1, and bad usage with exit code 2."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import stack_e2e as e2e

from pko.api import names
from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import controlplane, gitserver, operator

SCRIPT = Path(sys.executable).parent / "kubectl-pko"


async def ctl(cp: controlplane.ControlPlane, *args: str) -> tuple[int, str, str]:
    """Run the console script (never blocking the loop the in-process operator runs on)."""
    proc = await asyncio.create_subprocess_exec(
        str(SCRIPT), "--help" if not args else args[0], *args[1:], "--kubeconfig", str(cp.kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def table(text: str) -> dict[str, list[str]]:
    """The `get` table by Stack name (cells split on the three-space column gap)."""
    lines = text.splitlines()
    return {line.split()[0]: [c.strip() for c in line.split("   ") if c.strip()] for line in lines[1:]}


async def test_get_retry_suspend_resume_describe_logs_on_a_fleet(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    cluster: controlplane.ControlPlane,
) -> None:
    good, bad = f"ctl-good-{namespace}", f"ctl-bad-{namespace}"
    good_commit = e2e.create_repo(git, good)
    e2e.create_repo(git, bad, failing=True)
    labels = {"metadata": {"labels": {"tier": "web"}}}
    ok = e2e.git_stack("ok", namespace, git.http_url(good), commit=good_commit)
    ok["metadata"]["labels"] = {"tier": "web"}
    await kc.create(ok)
    stalled = e2e.git_stack("stalled", namespace, git.http_url(bad), branch="main", retryPolicy={"maxFailures": 0})
    await kc.create(stalled)
    waiting = e2e.git_stack("waiting", namespace, git.http_url(bad), branch="main",
                            retryPolicy={"backoffBaseSeconds": 3600})
    waiting["metadata"].update(labels["metadata"])
    await kc.create(waiting)
    await e2e.wait_for(kc, resources.STACK, "ok", namespace, e2e.is_ready)
    first = await e2e.wait_for(kc, resources.STACK, "stalled", namespace,
                               lambda o: e2e.reason(o, "Stalled") is not None)
    await e2e.wait_for(kc, resources.STACK, "waiting", namespace,
                       lambda o: e2e.last_update(o).get("state") == "failed" and "currentUpdate" not in o["status"])

    # get: the three states, the failure counter, the next retry an hour after the failure
    code, out, err = await ctl(cluster, "get", "-n", namespace)
    assert (code, err) == (0, "")
    rows = table(out)
    assert out.splitlines()[0].split()[:2] == ["NAME", "STATE"]
    assert rows["ok"][1] == "Ready"
    assert rows["ok"][2].startswith("up/succeeded ")
    assert rows["stalled"][1] == "Stalled"
    assert rows["stalled"][2].startswith("up/failed ")
    assert rows["stalled"][3:6] == ["0", "-", "no"]
    assert rows["waiting"][1] == "Reconciling"
    code, out, _ = await ctl(cluster, "get", "-n", namespace, "-o", "json")
    items = {i["name"]: i for i in json.loads(out)["items"]}
    failed_at = e2e.timestamp(items["waiting"]["last_time"])
    assert e2e.timestamp(items["waiting"]["next_retry"]) == failed_at + e2e.datetime.timedelta(seconds=3600)
    # the time the operator wrote with its own settings applied (what the CLI shows)
    waiting_stack = await kc.get(resources.STACK, "waiting", namespace)
    assert waiting_stack["status"]["nextRetryTime"] == items["waiting"]["next_retry"]
    assert "nextRetryTime" not in (await kc.get(resources.STACK, "ok", namespace))["status"]
    assert rows["waiting"][4].startswith(items["waiting"]["next_retry"] + " (in ")
    assert (items["ok"]["state"], items["ok"]["next_retry"], items["stalled"]["failures"]) == ("Ready", None, 0)
    code, out, _ = await ctl(cluster, "get", "-n", namespace, "-l", "tier=web", "-o", "wide")
    assert sorted(table(out)) == ["ok", "waiting"]
    assert "MESSAGE" in out.splitlines()[0]
    code, out, _ = await ctl(cluster, "get", "-A", "-l", "tier=web")
    assert [line.split()[:2] for line in out.splitlines()[1:]] == [[namespace, "ok"], [namespace, "waiting"]]

    # retry --all-stalled: the failing Stacks only; the operator runs the Stalled one again at once
    code, out, err = await ctl(cluster, "retry", "--all-stalled", "-n", namespace)
    assert code == 0, err
    assert sorted(out.splitlines()) == [f"stack {namespace}/stalled: retry requested",
                                        f"stack {namespace}/waiting: retry requested"]
    annotated = await kc.get(resources.STACK, "stalled", namespace)
    request = annotated["metadata"]["annotations"][names.ANNOTATION_RECONCILE_REQUEST]
    assert request.startswith("retry-")
    assert names.ANNOTATION_RECONCILE_REQUEST not in ((await kc.get(resources.STACK, "ok", namespace))
                                                      ["metadata"].get("annotations") or {})
    rerun = await e2e.wait_for(kc, resources.STACK, "stalled", namespace,
                               lambda o: e2e.last_update(o).get("reconcileRequest") == request)
    assert e2e.last_update(rerun)["name"] != e2e.last_update(first)["name"]
    updates = await e2e.updates_of(kc, "stalled", namespace)
    assert updates[-1]["spec"]["message"] == f'Sync request: "{request}"'

    # suspend / resume by label: spec.suspend set, then removed; get shows it
    code, out, _ = await ctl(cluster, "suspend", "-n", namespace, "-l", "tier=web")
    assert (code, sorted(out.splitlines())) == (0, [f"stack {namespace}/ok suspended",
                                                    f"stack {namespace}/waiting suspended"])
    await e2e.wait_for(kc, resources.STACK, "ok", namespace,
                       lambda o: e2e.condition(o, "Reconciling").get("reason") == "Suspended")
    code, out, _ = await ctl(cluster, "get", "-n", namespace, "ok")
    assert table(out)["ok"][1] == "Suspended"
    assert table(out)["ok"][-1] == "yes"
    code, out, _ = await ctl(cluster, "resume", "-n", namespace, "ok", "waiting")
    assert (code, out.splitlines()) == (0, [f"stack {namespace}/ok resumed", f"stack {namespace}/waiting resumed"])
    resumed = await kc.get(resources.STACK, "ok", namespace)
    assert "suspend" not in resumed["spec"]
    await e2e.wait_for(kc, resources.STACK, "ok", namespace, e2e.is_ready)

    # describe and logs of the failing Stack
    code, out, err = await ctl(cluster, "describe", "-n", namespace, "stalled")
    assert code == 0, err
    assert "State:            Stalled (UpdateFailed)" in out
    for section in ("Conditions:", "Last update:", "Updates:", "Workspace:", "Events:"):
        assert section in out
    assert "StackUpdateFailure" in out
    assert out.count("Failed") >= 2  # both Updates
    assert "Pod:              <none>" in out  # the local runtime has no pod
    code, out, err = await ctl(cluster, "logs", "-n", namespace, "stalled")
    assert code == 0, err
    assert "no workspace pod" in err
    assert out.startswith(f"update {e2e.last_update(rerun)['name']} (up): Failed\n")
    assert "the program refuses to run: boom" in out


async def test_bad_input_fails_clearly_with_script_exit_codes(
    kc: kclient.Client, namespace: str, cluster: controlplane.ControlPlane, tmp_path: Path,
) -> None:
    code, out, err = await ctl(cluster, "get", "-n", namespace, "-l", "tier in (a,")
    assert (code, out) == (1, "")
    assert err.startswith("error: ")
    assert "unable to parse requirement" in err  # the API server's own words
    code, _, err = await ctl(cluster, "describe", "-n", namespace, "nope")
    assert (code, err) == (1, f"error: stack {namespace}/nope not found\n")
    for command in ("logs", "suspend", "retry"):
        code, _, err = await ctl(cluster, command, "-n", namespace, "nope")
        assert (code, err) == (1, f"error: stack {namespace}/nope not found\n"), command
    code, _, err = await ctl(cluster, "retry", "-n", namespace)
    assert code == 2
    assert "give exactly one of NAME..., -l SELECTOR or --all-stalled" in err
    code, _, err = await ctl(cluster, "get", "-A", "-n", namespace)
    assert code == 2
    code, _, err = await ctl(cluster, "get", "--context", "elsewhere")
    assert code == 1
    assert "elsewhere" in err
    code, out, err = await ctl(cluster, "get", "-n", namespace)
    assert (code, out, err) == (0, "", f"No Stacks found in namespace {namespace}.\n")
    # `pko ctl` is the same command
    proc = await asyncio.create_subprocess_exec(
        str(SCRIPT.parent / "pko"), "ctl", "describe", "-n", namespace, "nope", "--kubeconfig", str(cluster.kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, raw = await proc.communicate()
    assert (proc.returncode, raw.decode()) == (1, f"error: stack {namespace}/nope not found\n")
