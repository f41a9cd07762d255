"""An `up` whose result an operator lost — it stopped while the `up` ran; the `up` finished in the backend — is
picked up by the next operator: with pko's agent it takes the backend's record of that `up` as the Update's result
and runs nothing; with the Go agent it marks the Update Aborted, as the reference does, and runs nothing either
(the Stack would retry). Real API server, operators in-process on the `local` runtime, the real Pulumi CLI."""

from __future__ import annotations

import base64
import datetime
import json
from pathlib import Path

import pytest

from pko.api import names
from pko.kube import client as kclient
from pko.kube import objects, owners, resources
from pko.testing import binaries, controlplane, gitserver, operator
from pko.testing.waiting import condition, wait_for

PASSPHRASE = {"type": "Literal", "literal": {"value": "resume-e2e"}}
PROJECT = "name: resumed\nruntime: yaml\noutputs:\n  answer: 42\n"


def _ups(backend: Path) -> list[dict[str, object]]:
    entries = [json.loads(p.read_text()) for p in (backend / ".pulumi" / "history").rglob("*.history.json")]
    return sorted((e for e in entries if e.get("kind") == "update"), key=lambda e: int(str(e["startTime"])))


def _time(unix: object) -> str:
    return datetime.datetime.fromtimestamp(int(str(unix)), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("agent", ["pko", "go"])
async def test_an_up_its_operator_lost_is_not_run_again(
    agent: str, kc: kclient.Client, namespace: str, git: gitserver.GitServer, cluster: controlplane.ControlPlane,
    tmp_path: Path, pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    options = {"namespace": namespace}
    if agent == "go":
        options["workspace_agent"] = str(binaries.require("pko-go-agent"))
    repo = f"resume-{namespace}"
    commit = git.create_repo(repo, {"Pulumi.yaml": PROJECT})
    backend = tmp_path / "state"
    backend.mkdir()

    async with operator.running(cluster.kubeconfig, tmp_path / "first", **options):
        await kc.create(resources.STACK.new("resumed", namespace, spec={
            "stack": "dev", "projectRepo": git.http_url(repo), "commit": commit, "backend": f"file://{backend}",
            "envRefs": {"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE}}))
        await wait_for(kc, resources.STACK, "resumed", namespace,
                       lambda o: condition(o, "Ready").get("status") == "True", timeout=240)
    # That operator is gone. Suppose it had started one more `up` — the one the backend recorded — and died before
    # its result reached the Update: the Update says Progressing since just before that `up` began.
    [done] = _ups(backend)
    [workspace] = (await kc.list(resources.WORKSPACE, namespace)).items
    update = owners.set_controller_reference(resources.UPDATE.new("lost", namespace, spec={
        "workspaceName": objects.name_of(workspace), "stackName": "dev", "type": "up"}), workspace)
    await kc.create(update)
    since = _time(done["startTime"])
    # its Progressing began a second before that `up` did (an `up` begun in the Update's own second is run again:
    # the history, in whole seconds, cannot tell it from the Update's predecessor; pko.agent.resume)
    progressing = _time(int(str(done["startTime"])) - 1)
    await kc.apply_status({
        "apiVersion": update["apiVersion"], "kind": update["kind"],
        "metadata": {"name": "lost", "namespace": namespace},
        "status": {"conditions": [
            {"type": t, "status": s, "reason": "Progressing", "message": "", "lastTransitionTime": progressing}
            for t, s in (("Progressing", "True"), ("Failed", "False"), ("Complete", "False"))]},
    }, field_manager=names.FIELD_MANAGER_UPDATE_STATUS)

    async with operator.running(cluster.kubeconfig, tmp_path / "second", **options):
        ended = await wait_for(kc, resources.UPDATE, "lost", namespace,
                               lambda o: condition(o, "Complete").get("status") == "True", timeout=240)
    assert len(_ups(backend)) == 1, "the lost up ran again"
    if agent == "go":
        assert condition(ended, "Failed")["status"] == "True"
        assert condition(ended, "Failed")["reason"] == "Aborted"
        return
    assert condition(ended, "Failed")["status"] == "False", ended.get("status")
    status = ended["status"]
    assert status["outputs"] == "lost-stack-outputs"
    assert status["startTime"] == since
    secret = await kc.get(resources.SECRET, "lost-stack-outputs", namespace)
    assert json.loads(base64.b64decode(secret["data"]["answer"])) == 42
