"""pko's own features in real workspace pods, one scenario each, all started at once (each in a namespace of its
own) and each waited on by its test:

- approvals: the preview saves its plan in the workspace pod and the pod does not scale to zero while the plan awaits
  approval, however long past the idle timeout; the approved `up` applies exactly that plan (the Update names its
  digest) in the same pod; then the workspace sleeps;
- a workspace pod replaced between preview and approval: the plan is gone with it, so the approved `up` runs
  nothing (the Stack keeps its outputs, no failed update is counted), the approval is marked `PlanNotFound` with a
  `StackPlanLost` warning, and a new preview asks for a new approval, which applies;
- drift detection and remediation: files that a Python program manages from its pod (on a hostPath directory) are
  changed and deleted behind Pulumi's back; the scheduled check in the pod finds it and one refreshing update puts
  them back;
- destroy protection: deleting the Stack previews the destroy in the pod and deletes nothing until the preview is
  approved; then the pod destroys the files (`runProgram`: from the program) and the Stack is gone;
- outputs to a Secret and a ConfigMap with names the Stack chooses, read by a workload pod, and updated by the next
  update;
- suspend and resume: a suspended Stack starts no update for a changed spec; resumed, it runs it;
- the Go operator's 2.9.1 fix PKO#1299 in pods: the source-free workspace of a destroy, for a runtime whose install
  fails there (`go`: a project file, no `go.mod`, no `go` binary), is Ready without installing and the destroy runs;
- the Go operator's 2.9.1 fix PKO#1300 in pods: the destroy of a Stack whose `workspaceTemplate` has a `local`
  source gets one `fetch` init container and runs;
- git over SSH with `gitAuth.sshAuth` from the Stack's Secret, a key protected by a passphrase, against a real sshd at
  the node's address: the operator's pod resolves the branch and the workspace pod's `fetch` clones over it;
- git with `gitAuth.accessToken` from the Stack's Secret (sent as the reference sends it, basic auth as user `git`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import json
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pko.api import names
from pko.kube import client as kclient
from pko.kube import errors, owners, resources
from pko.testing import cluster, controlplane, gitserver, programs
from pko.testing.clusterbed import (
    PASSPHRASE,
    WORKSPACE_IMAGE,
    Release,
    diagnose,
    events_of,
    passphrase_env,
    started_scenarios,
    state_dir,
    workspace_template,
)
from pko.testing.waiting import condition, eventually, wait_for, wait_gone

#: A Pulumi YAML program that exports the config value it is given, and a secret.
GREETING = {"configuration": {"greeting": {"type": "String"}},
            "outputs": {"greeting": "${greeting}", "token": {"fn::secret": "t0ken-${greeting}"}}}
#: Where the Python scenarios' pods see the files their program manages (a hostPath directory of the node).
MANAGED = "/managed"


@dataclass
class Bed:
    """What one scenario runs against: its own namespace and a directory on the node, the shared cluster and git
    server."""

    ckc: kclient.Client
    real_cluster: cluster.Cluster
    namespace: str
    git: gitserver.GitServer
    root: Path
    exits: contextlib.AsyncExitStack  # what the scenario starts for itself, stopped after every namespace is gone

    def diagnostics(self) -> Callable[[], str]:
        return lambda: diagnose(self.real_cluster, self.namespace)

    async def wait_stack(self, name: str, test: Callable[[dict[str, Any]], bool], timeout: float = 400
                         ) -> dict[str, Any]:
        return await wait_for(self.ckc, resources.STACK, name, self.namespace, test, timeout=timeout,
                              diagnostics=self.diagnostics())

    def events(self, kind: str, name: str) -> list[dict[str, Any]]:
        return events_of(self.real_cluster, self.namespace, kind, name)

    async def program_stack(self, name: str, greeting: str, **spec: Any) -> None:
        await self.ckc.create(resources.PROGRAM.new(name, self.namespace, program=GREETING))
        await self.ckc.create(resources.STACK.new(name, self.namespace, spec={
            "stack": "dev", "programRef": {"name": name}, "backend": "file:///tmp", "envRefs": passphrase_env(),
            "config": {"greeting": greeting}, "workspaceTemplate": workspace_template(), **spec,
        }))

    async def files_stack(self, name: str, **spec: Any) -> Path:
        """A Stack of the Python program that manages alpha.txt and beta.txt (:data:`programs.FILES_MAIN`) in a
        directory of the node its pod mounts, its file backend in another; the files' directory."""
        repo = f"{name}-{self.namespace}"
        self.git.create_repo(repo, programs.python_files(name))
        files, state = state_dir(self.root, name), state_dir(self.root, f"{name}-state")
        # the state outlives the pod too: a destroy runs in a pod of its own (its workspace has no source)
        pod = {"volumes": [{"name": "managed", "hostPath": {"path": str(files), "type": "Directory"}},
                           {"name": "state", "hostPath": {"path": str(state), "type": "Directory"}}],
               "containers": [{"name": "pulumi", "volumeMounts": [{"name": "managed", "mountPath": MANAGED},
                                                                   {"name": "state", "mountPath": "/state"}]}]}
        await self.ckc.create(resources.STACK.new(name, self.namespace, spec={
            "stack": "dev", "projectRepo": self.git.http_url(repo), "branch": "main", "backend": "file:///state",
            "envRefs": passphrase_env(), "config": {"dir": MANAGED},
            "workspaceTemplate": workspace_template(podTemplate={"spec": pod}), **spec,
        }))
        return files

    async def approve(self, name: str, stack: str, digest: str) -> None:
        await self.ckc.create(resources.STACK_APPROVAL.new(name, self.namespace, spec={
            "stackName": stack, "digest": digest, "approvedBy": controlplane.ADMIN_USER}))


def _review(obj: dict[str, Any]) -> dict[str, Any]:
    return dict((obj.get("status") or {}).get("approval") or {})


def _awaiting(operation: str = "update", other_than: str | None = None) -> Callable[[dict[str, Any]], bool]:
    """The Stack awaits approval of a plan of `operation` previewed by another Update than `other_than`."""
    def test(obj: dict[str, Any]) -> bool:
        review = _review(obj)
        return (review.get("state") == "AwaitingApproval" and bool(review.get("digest"))
                and review.get("operation", "update") == operation and review.get("preview") != other_than
                and condition(obj, "AwaitingApproval").get("status") == "True")
    return test


def _ready_with(greeting: str) -> Callable[[dict[str, Any]], bool]:
    """Ready at its current generation, with `greeting` as its output."""
    def test(obj: dict[str, Any]) -> bool:
        status = obj.get("status") or {}
        return (condition(obj, "Ready").get("status") == "True"
                and status.get("observedGeneration") == obj["metadata"]["generation"]
                and (status.get("lastUpdate") or {}).get("generation") == obj["metadata"]["generation"]
                and (status.get("outputs") or {}).get("greeting") == greeting)
    return test


def _ready(obj: dict[str, Any]) -> bool:
    return (condition(obj, "Ready").get("status") == "True"
            and (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"])


def _time(value: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


async def _pod_uid(bed: Bed, stack: str) -> str | None:
    try:
        pod = await bed.ckc.get(resources.POD, f"{stack}-workspace-0", bed.namespace)
    except errors.NotFound:
        return None
    return None if pod["metadata"].get("deletionTimestamp") else str(pod["metadata"]["uid"])


async def approvals_and_sleep(bed: Bed) -> None:
    ckc, ns = bed.ckc, bed.namespace
    await bed.program_stack("gated", "one", approval={"required": True}, workspaceIdleTimeout="5s")
    stack = await bed.wait_stack("gated", _awaiting())
    review = _review(stack)
    assert review["changes"], review
    preview = await ckc.get(resources.UPDATE, review["preview"], ns)
    assert preview["spec"]["type"] == "preview"
    assert preview["metadata"]["annotations"][names.ANNOTATION_SAVE_PLAN] == "true"
    assert preview["metadata"]["annotations"][names.ANNOTATION_PLANNED_DIGEST] == review["digest"]
    assert (stack.get("status") or {}).get("outputs") is None, "something was applied before the approval"
    previewed_in = await _pod_uid(bed, "gated")
    assert previewed_in is not None

    # The plan lives in the pod: the workspace stays awake well past its idle timeout while the plan waits.
    done = _time(condition(preview, "Complete")["lastTransitionTime"])
    await eventually(lambda: datetime.datetime.now(datetime.UTC) >= done + datetime.timedelta(seconds=20),
                     "the idle timeout to pass several times", timeout=60, interval=1)
    workspace = await ckc.get(resources.WORKSPACE, "gated", ns)
    assert condition(workspace, "Ready").get("reason") != "Sleeping", workspace.get("status")
    sts = await ckc.get(resources.STATEFUL_SET, "gated-workspace", ns)
    assert sts["spec"]["replicas"] == 1
    assert await _pod_uid(bed, "gated") == previewed_in, "the pod holding the plan was replaced"

    # The approved up applies exactly the reviewed plan, in that pod.
    await bed.approve("gated-ok", "gated", review["digest"])
    stack = await bed.wait_stack("gated", _ready_with("one"), timeout=300)
    last = stack["status"]["lastUpdate"]
    assert (last["type"], last["state"]) == ("up", "succeeded")
    up = await ckc.get(resources.UPDATE, last["name"], ns)
    assert up["metadata"]["annotations"][names.ANNOTATION_PLAN_DIGEST] == review["digest"]
    assert (_review(stack)["state"], _review(stack)["approval"]) == ("Approved", "gated-ok")
    approval = await ckc.get(resources.STACK_APPROVAL, "gated-ok", ns)
    assert (condition(approval, "Accepted").get("status"), condition(approval, "Accepted").get("reason")) == (
        "True", "Applied")
    assert "StackApproved" in [e["reason"] for e in bed.events("Stack", "gated")]

    # With nothing left to wait for, the workspace scales to zero.
    await wait_for(ckc, resources.WORKSPACE, "gated", ns, lambda o: condition(o, "Ready").get("reason") == "Sleeping",
                   timeout=180, diagnostics=bed.diagnostics())
    await wait_for(ckc, resources.STATEFUL_SET, "gated-workspace", ns, lambda o: o["spec"]["replicas"] == 0,
                   timeout=60)


async def plan_lost_with_its_pod(bed: Bed) -> None:
    ckc, ns = bed.ckc, bed.namespace
    await bed.program_stack("replan", "one", approval={"required": True})
    stack = await bed.wait_stack("replan", _awaiting())
    await bed.approve("replan-1", "replan", _review(stack)["digest"])
    stack = await bed.wait_stack("replan", _ready_with("one"), timeout=300)
    applied = stack["status"]["lastUpdate"]["name"]

    await ckc.patch(resources.STACK, "replan", {"spec": {"config": {"greeting": "two"}}}, ns)
    stack = await bed.wait_stack("replan", _awaiting(other_than=_review(stack)["preview"]), timeout=300)
    stale = _review(stack)
    # The pod holding the plan is replaced (a node drain, an eviction); its StatefulSet brings a new one.
    old = await _pod_uid(bed, "replan")
    await ckc.delete(resources.POD, "replan-workspace-0", ns)

    async def replaced() -> bool:
        uid = await _pod_uid(bed, "replan")
        workspace = await ckc.get(resources.WORKSPACE, "replan", ns)
        return uid not in (None, old) and condition(workspace, "Ready").get("status") == "True"
    await eventually(replaced, "a new workspace pod, ready", timeout=300, interval=1)

    # The approval of the plan the old pod held applies nothing: the up finds no plan, runs nothing, and says so;
    # the approval is marked PlanNotFound and a new preview asks for a new approval.
    await bed.approve("replan-2", "replan", stale["digest"])
    refused = await wait_for(ckc, resources.STACK_APPROVAL, "replan-2", ns,
                             lambda o: condition(o, "Accepted").get("reason") == "PlanNotFound", timeout=300,
                             diagnostics=bed.diagnostics())
    assert condition(refused, "Accepted")["status"] == "False"
    assert "is no longer in the workspace" in condition(refused, "Accepted")["message"]
    stack = await bed.wait_stack("replan", _awaiting(other_than=stale["preview"]), timeout=300)
    assert stack["status"]["outputs"]["greeting"] == "one", "something outside the review was applied"
    assert stack["status"]["lastUpdate"]["name"] == applied, "a plan that never ran is no failed update"
    lost = [e for e in bed.events("Stack", "replan") if e["reason"] == "StackPlanLost"]
    assert [(e["type"], e["message"]) for e in lost] == [("Warning", condition(refused, "Accepted")["message"])]

    await bed.approve("replan-3", "replan", _review(stack)["digest"])
    stack = await bed.wait_stack("replan", _ready_with("two"), timeout=300)
    assert _review(stack)["approval"] == "replan-3"


async def drift_remediated(bed: Bed) -> None:
    ckc, ns = bed.ckc, bed.namespace
    files = await bed.files_stack("healed", driftDetection={"interval": "10s", "remediate": True})
    stack = await bed.wait_stack("healed", _ready, timeout=600)
    up = stack["status"]["lastUpdate"]["name"]
    assert (files / "alpha.txt").read_text() == "alpha as declared"
    assert (files / "beta.txt").read_text() == "beta as declared"

    # Behind Pulumi's back: one file edited, the other deleted.
    (files / "alpha.txt").write_text("alpha edited by hand")
    (files / "beta.txt").unlink()

    def remediated(obj: dict[str, Any]) -> bool:
        last = (obj.get("status") or {}).get("lastUpdate") or {}
        return (condition(obj, "Drifted").get("reason") in ("Remediated", "NoDrift") and last.get("name") != up
                and last.get("state") == "succeeded")
    stack = await bed.wait_stack("healed", remediated, timeout=300)
    assert (files / "alpha.txt").read_text() == "alpha as declared"
    assert (files / "beta.txt").read_text() == "beta as declared"
    remediation = await ckc.get(resources.UPDATE, stack["status"]["lastUpdate"]["name"], ns)
    assert remediation["spec"]["refresh"] is True
    assert remediation["spec"]["message"] == "Drift detected: 2 resource(s) drifted; remediating", remediation
    detected = [e["message"] for e in bed.events("Stack", "healed") if e["reason"] == "DriftDetected"]
    assert len(detected) == 1, detected
    assert detected[0].startswith("2 resource(s) drifted: "), detected
    drifted = detected[0].removeprefix("2 resource(s) drifted: ").split(", ")
    assert [urn.rsplit("::", 1)[1] for urn in drifted] == ["alpha (update)", "beta (create)"], detected
    # the next check, in the same pod, confirms
    await bed.wait_stack("healed", lambda o: condition(o, "Drifted").get("reason") == "NoDrift", timeout=120)


async def destroy_protected(bed: Bed) -> None:
    ckc, ns = bed.ckc, bed.namespace
    # runProgram: a destroy of a dynamic provider's resources needs the program's SDK, which the source-free workspace
    # of a destroy without it does not install (PKO#1299): that destroy would fail with "No module named 'pulumi'"
    files = await bed.files_stack("kept", destroyOnFinalize=True, runProgram=True, destroyProtection={"enabled": True})
    await bed.wait_stack("kept", _ready, timeout=600)
    assert sorted(p.name for p in files.iterdir()) == ["alpha.txt", "beta.txt"]

    await ckc.delete(resources.STACK, "kept", ns)
    stack = await bed.wait_stack("kept", _awaiting("destroy"), timeout=300)
    review = _review(stack)
    # the two files and the stack (the summary does not count the dynamic provider, which the URNs list)
    assert review["changes"].get("delete") == 3, review
    assert {"alpha", "beta"} <= {urn.rsplit("::", 1)[1] for urn in review["resources"]}, review
    assert sorted(p.name for p in files.iterdir()) == ["alpha.txt", "beta.txt"], "deleted before the confirmation"
    preview = await ckc.get(resources.UPDATE, review["preview"], ns)
    assert (preview["spec"]["type"], preview["metadata"]["annotations"][names.ANNOTATION_PREVIEW_ONLY]) == (
        "destroy", "true")

    await bed.approve("kept-destroy", "kept", review["digest"])
    await wait_gone(ckc, resources.STACK, "kept", ns, 300)
    assert list(files.iterdir()) == [], "the approved destroy left files behind"


async def outputs_published(bed: Bed) -> None:
    ckc, ns = bed.ckc, bed.namespace
    await bed.program_stack("published", "one", outputs={
        "secretName": "published-out", "configMapName": "published-settings",
        "template": {"line": "{{ .outputs.greeting }}:{{ .outputs.token }}"}})
    await bed.wait_stack("published", _ready_with("one"))

    async def published(greeting: str) -> None:
        async def written() -> bool:
            try:
                secret = await ckc.get(resources.SECRET, "published-out", ns)
                settings = await ckc.get(resources.CONFIG_MAP, "published-settings", ns)
            except errors.NotFound:
                return False
            values = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
            return (values.get("greeting") == greeting and values.get("token") == f"t0ken-{greeting}"
                    and values.get("line") == f"{greeting}:t0ken-{greeting}"
                    and settings.get("data") == {"greeting": greeting})
        await eventually(written, f"the outputs of {greeting!r} in the Secret and ConfigMap", timeout=60, interval=1)
    await published("one")

    # A workload reads them as users' pods do: an env var from the ConfigMap, files from the Secret.
    log = await _run_in_a_pod(
        bed, "reader", 'echo "greeting=$GREETING"; echo "line=$(cat /out/line)"',
        env=[{"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "published-settings", "key": "greeting"}}}],
        volumes={"out": ({"secret": {"secretName": "published-out"}}, "/out")})
    assert log.split() == ["greeting=one", "line=one:t0ken-one"], log

    await ckc.patch(resources.STACK, "published", {"spec": {"config": {"greeting": "two"}}}, ns)
    await bed.wait_stack("published", _ready_with("two"), timeout=300)
    await published("two")


async def suspended_and_resumed(bed: Bed) -> None:
    ckc, ns = bed.ckc, bed.namespace
    await bed.program_stack("paused", "one")
    stack = await bed.wait_stack("paused", _ready_with("one"))
    applied = stack["status"]["lastUpdate"]["name"]

    await ckc.patch(resources.STACK, "paused", {"spec": {"suspend": True, "config": {"greeting": "two"}}}, ns)

    def suspended(obj: dict[str, Any]) -> bool:
        reconciling = condition(obj, "Reconciling")
        return ((reconciling.get("status"), reconciling.get("reason")) == ("False", "Suspended")
                and obj["status"].get("observedGeneration") == obj["metadata"]["generation"])
    await bed.wait_stack("paused", suspended, timeout=120)
    # No update starts while suspended, whatever the pod is doing meanwhile (it idles, ready for work).
    await asyncio.sleep(10)
    stack = await ckc.get(resources.STACK, "paused", ns)
    assert (stack["status"]["lastUpdate"]["name"], stack["status"].get("currentUpdate")) == (applied, None)
    assert stack["status"]["outputs"]["greeting"] == "one"
    ups = [u for u in (await ckc.list(resources.UPDATE, ns)).items if u["spec"].get("type") == "up"]
    assert [u["metadata"]["name"] for u in ups] == [applied]
    assert "StackSuspended" in [e["reason"] for e in bed.events("Stack", "paused")]

    await ckc.patch(resources.STACK, "paused", {"spec": {"suspend": False}}, ns)
    await bed.wait_stack("paused", _ready_with("two"), timeout=300)
    assert "StackResumed" in [e["reason"] for e in bed.events("Stack", "paused")]


async def destroyed_from_a_local_source(bed: Bed) -> None:
    """PKO#1300 (the Go operator's 2.9.1): `destroyOnFinalize` with `runProgram` off and a `workspaceTemplate` `local`
    source. The destroy's workspace pod has one `fetch` init container (two would be refused by the API server, and
    the destroy would never run), and the destroy runs in it, from the program the image holds (a hostPath here)."""
    ckc, ns = bed.ckc, bed.namespace
    app, state = state_dir(bed.root, "local-app"), state_dir(bed.root, "local-state")
    (app / "Pulumi.yaml").write_text("name: local-app\nruntime: yaml\noutputs:\n  greeting: from the image\n")
    (app / "Pulumi.yaml").chmod(0o666)
    pod = {"volumes": [{"name": "app", "hostPath": {"path": str(app), "type": "Directory"}},
                       {"name": "state", "hostPath": {"path": str(state), "type": "Directory"}}],
           "containers": [{"name": "pulumi", "volumeMounts": [{"name": "app", "mountPath": "/app"},
                                                               {"name": "state", "mountPath": "/state"}]}]}
    await ckc.create(resources.STACK.new("local", ns, spec={
        "stack": "dev", "backend": "file:///state", "envRefs": passphrase_env(), "destroyOnFinalize": True,
        "workspaceTemplate": workspace_template(local={"dir": "/app"}, podTemplate={"spec": pod}),
    }))
    stack = await bed.wait_stack("local", _ready_with("from the image"))
    assert stack["status"]["projectInfo"]["name"] == "local-app"

    await ckc.delete(resources.STACK, "local", ns)
    inits: list[list[str]] = []

    async def destroyed() -> bool:
        for found in (await ckc.list(resources.POD, ns)).items:
            names_ = [c["name"] for c in found["spec"].get("initContainers") or ()]
            if names_ not in inits:
                inits.append(names_)
        try:
            await ckc.get(resources.STACK, "local", ns)
        except errors.NotFound:
            return True
        return False
    await eventually(destroyed, "the Stack destroyed and gone", timeout=300, interval=0.5)
    assert inits, "no workspace pod seen"
    assert all(sorted(found) == ["bootstrap", "fetch"] for found in inits), inits
    # the state the pods kept on the node: the stack holds no resources (or is removed with them)
    written = state / ".pulumi" / "stacks" / "local-app" / "dev.json"
    assert (state / ".pulumi").is_dir(), "the backend was never written"
    if written.exists():
        checkpoint = json.loads(written.read_text())["checkpoint"]
        assert not (checkpoint.get("latest") or {}).get("resources"), "the destroy left resources"


async def destroyed_without_an_install(bed: Bed) -> None:
    """PKO#1299 (the Go operator's 2.9.1): the Workspace the Stack controller builds for a destroy from
    `status.projectInfo` alone has a project file and no program. For a Go project, `pulumi install` there fails
    (shown first, in a pod of the same image); before 2.9.1 that stalled the Workspace and stranded the resources.
    pko's is Ready without installing, and the destroy runs in its pod."""
    ckc, ns = bed.ckc, bed.namespace
    premise = await _run_in_a_pod(bed, "premise", "mkdir -p /tmp/p && cd /tmp/p && "
                                  "printf 'name: stranded\\nruntime: go\\n' > Pulumi.yaml && pulumi install; "
                                  "echo \"exit=$?\"")
    exit_code = premise.rsplit("exit=", 1)[-1].strip()
    assert exit_code not in ("0", premise.strip()), f"the premise: installing for go fails here\n{premise}"

    state = state_dir(bed.root, "stranded-state")
    pod = {"volumes": [{"name": "state", "hostPath": {"path": str(state), "type": "Directory"}}],
           "containers": [{"name": "pulumi", "volumeMounts": [{"name": "state", "mountPath": "/state"}]}]}
    # the stack's state, with resources: a YAML program of the same project, up in a workspace pod of its own
    await ckc.create(resources.PROGRAM.new("stranded", ns, program={"outputs": {"greeting": "stranded"}}))
    await ckc.create(resources.STACK.new("stranded", ns, spec={
        "stack": "dev", "programRef": {"name": "stranded"}, "backend": "file:///state", "envRefs": passphrase_env(),
        "workspaceTemplate": workspace_template(podTemplate={"spec": pod})}))
    stack = await bed.wait_stack("stranded", _ready_with("stranded"))
    project = stack["status"]["projectInfo"]["name"]
    written = state / ".pulumi" / "stacks" / project / "dev.json"
    assert json.loads(written.read_text())["checkpoint"]["latest"]["resources"], "the up wrote no resources"
    await ckc.delete(resources.STACK, "stranded", ns)  # no destroyOnFinalize: the state stays
    await wait_gone(ckc, resources.STACK, "stranded", ns, 300)

    spec = workspace_template(podTemplate={"spec": pod})["spec"] | {
        "projectInfo": {"name": project, "runtime": "go"}, "stacks": [{"name": "dev", "create": False}],
        "env": [{"name": "PULUMI_BACKEND_URL", "value": "file:///state"},
                {"name": "PULUMI_CONFIG_PASSPHRASE", "value": PASSPHRASE}]}
    workspace = await ckc.create(resources.WORKSPACE.new("destroy", ns, spec=spec))
    ready = await wait_for(ckc, resources.WORKSPACE, "destroy", ns,
                           lambda o: condition(o, "Ready").get("status") == "True"
                           or condition(o, "Stalled").get("status") == "True", timeout=300,
                           diagnostics=bed.diagnostics())
    assert condition(ready, "Stalled").get("status") != "True", ready["status"]
    # owned by its Workspace, as the Stack controller makes it (an Update without one is cancelled)
    await ckc.create(owners.set_controller_reference(resources.UPDATE.new("destroy-1", ns, spec={
        "workspaceName": "destroy", "stackName": "dev", "type": "destroy", "ttlAfterCompleted": "1h"}), workspace))
    done = await wait_for(ckc, resources.UPDATE, "destroy-1", ns,
                          lambda o: condition(o, "Complete").get("status") == "True", timeout=300,
                          diagnostics=bed.diagnostics())
    assert condition(done, "Failed")["status"] == "False", f"{json.dumps(done['status'])}\n{bed.diagnostics()()}"
    checkpoint = json.loads(written.read_text())["checkpoint"]
    assert not (checkpoint.get("latest") or {}).get("resources"), "the destroy left resources"


async def _run_in_a_pod(bed: Bed, name: str, script: str, *, env: Sequence[dict[str, Any]] = (),
                        volumes: dict[str, tuple[dict[str, Any], str]] | None = None) -> str:
    """`script` in a pod of the workspace image, as the workspace pods run (restricted), with more `env` and
    `volumes` (name: (source, read-only mount path)); its log once it has ended."""
    volumes = volumes or {}
    await bed.ckc.create({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": bed.namespace},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": name, "image": WORKSPACE_IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script], "env": [{"name": "HOME", "value": "/tmp"}, *env],
                "volumeMounts": [{"name": v, "mountPath": path, "readOnly": True} for v, (_, path) in volumes.items()],
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            }],
            "volumes": [{"name": v, **source} for v, (source, _) in volumes.items()],
        },
    })
    await wait_for(bed.ckc, resources.POD, name, bed.namespace,
                   lambda o: o["status"].get("phase") in ("Succeeded", "Failed"), timeout=180,
                   diagnostics=bed.diagnostics())
    return bed.real_cluster.kubectl("logs", "-n", bed.namespace, name).stdout


SSH_PASSPHRASE = "ssh-PLANTED-passphrase-pods"


async def cloned_over_ssh(bed: Bed) -> None:
    """`gitAuth.sshAuth` in pods: the key and its passphrase from the Stack's Secret. Neither pko's image nor the
    workspace pod's user (UID 1000, in no passwd file of that image) could run an `ssh` client: pko speaks SSH
    itself, as the Go operator does, so this works in the operator's pod and in the workspace pod's `fetch`."""
    ckc, ns = bed.ckc, bed.namespace
    server = bed.exits.enter_context(gitserver.running(bed.root / "ssh-git", ssh=True,
                                                       host=bed.real_cluster.node_ip))
    assert server.ssh is not None
    keys = bed.root / "ssh-keys"
    keys.mkdir()
    private_key = server.authorize_new_key(keys, SSH_PASSPHRASE)
    commit = server.create_repo("over-ssh", {
        "Pulumi.yaml": "name: over-ssh\nruntime: yaml\noutputs:\n  cloned: over ssh\n"})
    await ckc.create(resources.SECRET.new("git-ssh", ns, stringData={"key": private_key,
                                                                       "passphrase": SSH_PASSPHRASE}))

    def ref(key: str) -> dict[str, Any]:
        return {"type": "Secret", "secret": {"name": "git-ssh", "key": key}}
    await ckc.create(resources.STACK.new("over-ssh", ns, spec={
        "stack": "dev", "projectRepo": server.ssh_url("over-ssh"), "branch": "main", "backend": "file:///tmp",
        "envRefs": passphrase_env(), "workspaceTemplate": workspace_template(),
        "gitAuth": {"sshAuth": {"sshPrivateKey": ref("key"), "password": ref("passphrase")}},
    }))
    stack = await bed.wait_stack("over-ssh", lambda o: _ready(o) and (o["status"].get("outputs") or {}).get(
        "cloned") == "over ssh", timeout=300)
    assert stack["status"]["lastUpdate"]["lastSuccessfulCommit"] == commit
    # both ends logged in with the Stack's key: the operator listing the branch, the workspace pod fetching it
    accepted = [line for line in server.ssh.log_path.read_text().splitlines() if "Accepted publickey" in line]
    assert len(accepted) >= 2, server.ssh.log_path.read_text()[-3000:]
    said = json.dumps(stack["status"]) + json.dumps([e["message"] for e in bed.events("Stack", "over-ssh")])
    assert SSH_PASSPHRASE not in said
    assert private_key.splitlines()[1] not in said


async def cloned_with_a_token(bed: Bed) -> None:
    """`gitAuth.accessToken` in pods: a repository only that token opens (the operator's pod lists its branch, the
    workspace pod's `fetch` clones it)."""
    ckc, ns = bed.ckc, bed.namespace
    repo, token = f"with-token-{ns}", f"PLANTED-token-{ns}"
    commit = bed.git.create_repo(repo, {
        "Pulumi.yaml": "name: with-token\nruntime: yaml\noutputs:\n  cloned: with a token\n"})
    bed.git.protect(repo, "git", token)
    await ckc.create(resources.SECRET.new("git-token", ns, stringData={"token": token}))
    await ckc.create(resources.STACK.new("with-token", ns, spec={
        "stack": "dev", "projectRepo": bed.git.http_url(repo), "branch": "main", "backend": "file:///tmp",
        "envRefs": passphrase_env(), "workspaceTemplate": workspace_template(),
        "gitAuth": {"accessToken": {"type": "Secret", "secret": {"name": "git-token", "key": "token"}}},
    }))
    stack = await bed.wait_stack("with-token", lambda o: _ready(o) and (o["status"].get("outputs") or {}).get(
        "cloned") == "with a token", timeout=300)
    assert stack["status"]["lastUpdate"]["lastSuccessfulCommit"] == commit
    said = json.dumps(stack["status"]) + json.dumps([e["message"] for e in bed.events("Stack", "with-token")])
    assert token not in said


SCENARIOS: dict[str, Callable[[Bed], Coroutine[Any, Any, None]]] = {
    "approvals": approvals_and_sleep, "plan_lost": plan_lost_with_its_pod, "drift": drift_remediated,
    "destroy_protection": destroy_protected, "outputs": outputs_published, "suspend": suspended_and_resumed,
    "local_destroy": destroyed_from_a_local_source, "install_free_destroy": destroyed_without_an_install,
    "ssh": cloned_over_ssh, "token": cloned_with_a_token,
}
SCENARIO_TESTS = {  # the test that waits for each scenario
    "approvals": "test_an_approved_plan_is_applied_in_the_pod_that_kept_it_awake",
    "plan_lost": "test_a_plan_lost_with_its_pod_applies_nothing_and_asks_for_a_new_approval",
    "drift": "test_drift_in_a_pods_resources_is_found_and_remediated",
    "destroy_protection": "test_a_protected_destroy_waits_for_its_approval",
    "outputs": "test_outputs_are_published_to_a_secret_and_a_configmap_that_pods_read",
    "suspend": "test_a_suspended_stack_starts_no_update_until_resumed",
    "local_destroy": "test_a_destroy_with_a_local_source_has_one_fetch_init_container",
    "install_free_destroy": "test_a_destroy_workspace_from_project_info_installs_nothing_and_runs",
    "ssh": "test_a_stack_clones_over_ssh_with_its_secrets_key_in_the_operator_and_workspace_pods",
    "token": "test_a_stack_clones_with_its_secrets_access_token",
}


@pytest.fixture(scope="module")
async def started(request: pytest.FixtureRequest, real_cluster: cluster.Cluster, operator_release: Release,
                  pod_git: gitserver.GitServer, tmp_path_factory: pytest.TempPathFactory,
                  ) -> AsyncIterator[dict[str, asyncio.Task[None]]]:
    """Every selected scenario, started at once in a namespace of its own."""
    root = tmp_path_factory.mktemp("own-features")

    def start(name: str, ckc: kclient.Client, namespace: str, exits: contextlib.AsyncExitStack,
              ) -> Coroutine[Any, Any, None]:
        return SCENARIOS[name](Bed(ckc, real_cluster, namespace, pod_git, root, exits))
    async with started_scenarios(request, real_cluster, SCENARIO_TESTS, start) as tasks:
        yield tasks


async def test_an_approved_plan_is_applied_in_the_pod_that_kept_it_awake(
        started: dict[str, asyncio.Task[None]]) -> None:
    await started["approvals"]


async def test_a_plan_lost_with_its_pod_applies_nothing_and_asks_for_a_new_approval(
        started: dict[str, asyncio.Task[None]]) -> None:
    await started["plan_lost"]


async def test_drift_in_a_pods_resources_is_found_and_remediated(started: dict[str, asyncio.Task[None]]) -> None:
    await started["drift"]


async def test_a_protected_destroy_waits_for_its_approval(started: dict[str, asyncio.Task[None]]) -> None:
    await started["destroy_protection"]


async def test_outputs_are_published_to_a_secret_and_a_configmap_that_pods_read(
        started: dict[str, asyncio.Task[None]]) -> None:
    await started["outputs"]


async def test_a_suspended_stack_starts_no_update_until_resumed(started: dict[str, asyncio.Task[None]]) -> None:
    await started["suspend"]


async def test_a_destroy_with_a_local_source_has_one_fetch_init_container(
        started: dict[str, asyncio.Task[None]]) -> None:
    await started["local_destroy"]


async def test_a_stack_clones_over_ssh_with_its_secrets_key_in_the_operator_and_workspace_pods(
        started: dict[str, asyncio.Task[None]]) -> None:
    await started["ssh"]


async def test_a_stack_clones_with_its_secrets_access_token(
        started: dict[str, asyncio.Task[None]]) -> None:
    await started["token"]


async def test_a_destroy_workspace_from_project_info_installs_nothing_and_runs(
        started: dict[str, asyncio.Task[None]]) -> None:
    await started["install_free_destroy"]
