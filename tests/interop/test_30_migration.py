"""Migration in place: a cluster running the Go operator with several Stacks (a Program, a Git source, one
failing, one with `destroyOnFinalize`) switches to pko by Helm without a Stack being touched — the procedure
docs/install.md gives — and, under ``make soak`` (``PKO_SOAK=1``), back to the Go operator (a rollback).

What must hold across each switch: the Stack objects and their Workspace StatefulSets are the same objects (same
UIDs), a StatefulSet rolls at most once, no Stack that is up to date runs an update, the Pulumi state is the same
(no history entry appears), finalizers stay, the failing Stack keeps its failure count and its backoff (no
immediate retry). After the switch the new operator manages everything: a config change deploys, a delete destroys
(pko after the switch; the Go operator after the rollback).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import cluster, crossrun, gitserver
from pko.testing.clusterbed import OPERATOR_NAMESPACE, RELEASE, diagnose, install_pko, passphrase_env, uninstall
from pko.testing.waiting import condition, eventually, wait_for, wait_gone

#: The way back to the Go operator (a rollback) runs only under `make soak`: `make test` keeps the way in (Go → pko),
#: with every check of a switch, and pko destroying on delete.
ROUND_TRIP = bool(os.environ.get("PKO_SOAK"))
#: The Stacks in this test and the kinds of Pulumi project they run (their state lives on the node, see `state`).
READY_STACKS = ("prog", "gitstack")
FAILING = "broken"
#: What pko adds to `status.lastUpdate` (docs/compatibility.md): the Go operator does not know it, so its first
#: status write after a rollback leaves it out — no update ran for that.
PKO_LAST_UPDATE_ADDITIONS = frozenset({"resourceChanges"})
CRDS = ("stacks.pulumi.com", "programs.pulumi.com", "workspaces.auto.pulumi.com", "updates.auto.pulumi.com")


@pytest.fixture
def state() -> Iterator[Path]:
    """A directory on the node for the stacks' file backend, mounted into the workspace pods, so the state outlives
    any pod (a rolled StatefulSet must find its stack where it left it). Workspace pods run as uid 1000."""
    path = Path("/tmp") / f"pko-migration-{uuid.uuid4().hex[:8]}"
    path.mkdir(mode=0o777)
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def no_operator_left(real_cluster: cluster.Cluster) -> AsyncIterator[None]:
    """Nothing of either operator left installed after the test, whichever step it stopped at."""
    yield
    for release, namespace in ((crossrun.GO_RELEASE, crossrun.GO_NAMESPACE), (RELEASE, OPERATOR_NAMESPACE)):
        crossrun.helm_uninstall(real_cluster, release, namespace)


def workspace_template(state: Path) -> dict[str, Any]:
    """Pods that trust the git server's CA and keep the stacks' state on the node."""
    template = crossrun.trusting_workspace_template()
    pod = template["spec"]["podTemplate"]["spec"]
    pod["volumes"].append({"name": "state", "hostPath": {"path": str(state), "type": "Directory"}})
    pod["containers"][0]["volumeMounts"].append({"name": "state", "mountPath": "/state"})
    return template


def stack_spec(state: Path, **spec: Any) -> dict[str, Any]:
    return {"stack": "dev", "backend": "file:///state", "envRefs": passphrase_env(),
            "workspaceTemplate": workspace_template(state), **spec}


def history(state: Path, project: str) -> list[str]:
    """The update history the file backend keeps for `project`'s stack `dev` (one entry per update run)."""
    return sorted(p.name for p in (state / ".pulumi" / "history" / project / "dev").glob("*.history.json"))


async def snapshot(ckc: kclient.Client, ns: str) -> dict[str, Any]:
    stacks = {s["metadata"]["name"]: s for s in (await ckc.list(resources.STACK, ns)).items}
    sets = {s["metadata"]["name"]: s for s in (await ckc.list(resources.STATEFUL_SET, ns)).items}
    return {
        "stacks": {n: (s["metadata"]["uid"], s["metadata"].get("finalizers")) for n, s in stacks.items()},
        "last": {n: (s.get("status") or {}).get("lastUpdate") or {} for n, s in stacks.items()},
        "sets": {n: (s["metadata"]["uid"], s["metadata"]["generation"]) for n, s in sets.items()},
        "updates": {u["metadata"]["name"]: u["metadata"]["creationTimestamp"]
                    for u in (await ckc.list(resources.UPDATE, ns)).items},
    }


def retry_due(last: dict[str, Any]) -> datetime.datetime:
    """When the failing Stack may run again: its backoff (10s·3ⁿ after n failures) from its last attempt."""
    return timestamp(last["lastResyncTime"]) + datetime.timedelta(seconds=10 * 3 ** int(last.get("failures") or 0))


def timestamp(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


async def failed_and_waiting(ckc: kclient.Client, ns: str, diagnostics: Callable[[], str]) -> None:
    """The failing Stack has failed twice (so its backoff is 90s) and waits for its next retry."""
    await wait_for(ckc, resources.STACK, FAILING, ns,
                   lambda o: (((o.get("status") or {}).get("lastUpdate") or {}).get("failures") or 0) >= 2
                   and "currentUpdate" not in (o.get("status") or {}), timeout=400, diagnostics=diagnostics)


async def settled(real_cluster: cluster.Cluster, namespace: str, stacks: int) -> None:
    """The operator in `namespace` has reconciled every Stack at least once since it started (its own counter)."""
    async def done() -> bool:
        try:
            return crossrun.reconciles(real_cluster, namespace, "stack-controller") >= stacks
        except (OSError, StopIteration):  # its Service not there yet, or not yet programmed by kube-proxy
            return False

    await eventually(done, "the new operator reconciled every Stack", timeout=180, interval=2)


def adopt_crds(real_cluster: cluster.Cluster, release: str, namespace: str) -> None:
    """Hand the CRDs to a Helm release (docs/install.md): the label and annotations Helm checks before it takes an
    existing object into a release."""
    real_cluster.kubectl("label", "--overwrite", "crd", *CRDS, "app.kubernetes.io/managed-by=Helm")
    real_cluster.kubectl("annotate", "--overwrite", "crd", *CRDS, f"meta.helm.sh/release-name={release}",
                         f"meta.helm.sh/release-namespace={namespace}")


def _go_fields(last: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in last.items() if k not in PKO_LAST_UPDATE_ADDITIONS}


async def assert_kept(ckc: kclient.Client, ns: str, before: dict[str, Any]) -> dict[str, Any]:
    after = await snapshot(ckc, ns)
    assert after["stacks"] == before["stacks"], "same Stack objects, same finalizers"
    for name, (uid, generation) in before["sets"].items():
        new_uid, new_generation = after["sets"][name]
        assert new_uid == uid, f"StatefulSet {name} was re-created"
        assert new_generation - generation <= 1, f"StatefulSet {name} rolled more than once"
    for name in READY_STACKS:
        assert _go_fields(after["last"][name]) == _go_fields(before["last"][name]), f"{name} ran no update"
        assert not [u for u in set(after["updates"]) - set(before["updates"]) if u.startswith(f"{name}-")]
    # the failing Stack: retried no earlier than its backoff said (the new operator read the failure count)
    due = retry_due(before["last"][FAILING])
    retries = {u: t for u, t in after["updates"].items() if u not in before["updates"] and u.startswith(FAILING)}
    assert all(timestamp(t) >= due - datetime.timedelta(seconds=2) for t in retries.values()), (due, retries)
    if not retries:
        assert _go_fields(after["last"][FAILING]) == _go_fields(before["last"][FAILING])
    return after


@pytest.mark.timeout(1800 if ROUND_TRIP else 1200)  # helm installs and uninstalls, StatefulSet rolls, backoffs
async def test_go_to_pko_and_back(
    ckc: kclient.Client, real_cluster: cluster.Cluster, pod_git: gitserver.GitServer,
    new_ns: Callable[[str], Awaitable[str]], state: Path, no_operator_left: None,
) -> None:
    ns = await new_ns("mig")
    crossrun.install_go_operator(real_cluster, crossrun.go_chart(), git_ca=pod_git.ca_pem)
    await crossrun.trust_git_ca(ckc, ns, pod_git)
    repo = f"pko/git-{ns}"  # owner/name: the Go operator refuses a repository URL with one path segment
    pod_git.create_repo(repo, {"Pulumi.yaml": "name: gitproj\nruntime: yaml\noutputs:\n  source: git\n"})
    await ckc.create(resources.PROGRAM.new("prog", ns, program=crossrun.PROGRAM))
    await ckc.create(resources.PROGRAM.new(FAILING, ns, program={"outputs": {"oops": "${undefinedVariable}"}}))
    await ckc.create(resources.STACK.new("prog", ns, spec=stack_spec(
        state, programRef={"name": "prog"}, config={"greeting": "before"}, destroyOnFinalize=True)))
    await ckc.create(resources.STACK.new("gitstack", ns, spec=stack_spec(
        state, projectRepo=pod_git.https_url(repo), branch="main")))
    await ckc.create(resources.STACK.new(FAILING, ns, spec=stack_spec(state, programRef={"name": FAILING})))

    def diagnostics() -> str:
        return f"{diagnose(real_cluster, ns)}\n{diagnose(real_cluster, crossrun.GO_NAMESPACE)}"

    for name in READY_STACKS:
        await wait_for(ckc, resources.STACK, name, ns, lambda o: condition(o, "Ready").get("status") == "True",
                       timeout=400, diagnostics=diagnostics)
    await failed_and_waiting(ckc, ns, diagnostics)
    histories = {p: history(state, p) for p in ("prog", "gitproj")}
    assert all(histories.values()), f"the stacks' state is on the node: {histories}"
    before = await snapshot(ckc, ns)

    # Go → pko: uninstall the Go operator (its CRDs stay), hand the CRDs to pko's release, install pko
    uninstall(real_cluster, crossrun.go_release())
    adopt_crds(real_cluster, RELEASE, OPERATOR_NAMESPACE)
    install_pko(real_cluster, "controller.metricsSecure=false", git_ca=pod_git.ca_pem)
    await settled(real_cluster, OPERATOR_NAMESPACE, 3)
    after_pko = await assert_kept(ckc, ns, before)
    assert {p: history(state, p) for p in histories} == histories, "no update ran against the stacks' state"

    # pko manages them now: a config change deploys on the state the Go operator left
    await ckc.patch(resources.STACK, "prog", {"spec": {"config": {"greeting": "with pko"}}}, ns)
    await wait_for(ckc, resources.STACK, "prog", ns,
                   lambda o: ((o.get("status") or {}).get("outputs") or {}).get("greeting") == "with pko"
                   and condition(o, "Ready").get("status") == "True", timeout=300, diagnostics=diagnostics)
    assert len(history(state, "prog")) == len(histories["prog"]) + 1, "an update of the same stack, not a new one"
    if not ROUND_TRIP:
        # pko destroys the Stack the Go operator deployed, and removes the others
        await delete_all(ckc, ns)
        assert len(history(state, "prog")) == len(histories["prog"]) + 2, history(state, "prog")
        return
    await failed_and_waiting(ckc, ns, diagnostics)
    before = await snapshot(ckc, ns)
    assert after_pko["stacks"] == before["stacks"]

    # pko → Go (a rollback): uninstall pko (its CRDs are kept), install the Go operator again
    uninstall(real_cluster, crossrun.pko_release())
    crossrun.install_go_operator(real_cluster, crossrun.go_chart(), git_ca=pod_git.ca_pem)
    await settled(real_cluster, crossrun.GO_NAMESPACE, 3)
    await assert_kept(ckc, ns, before)

    # the Go operator destroys the Stack pko last deployed
    await delete_all(ckc, ns)
    destroyed = history(state, "prog")
    assert len(destroyed) == len(histories["prog"]) + 2, destroyed


async def delete_all(ckc: kclient.Client, ns: str) -> None:
    """Delete the Stacks: `prog` first, destroyed (its finalizer), then the others."""
    await ckc.delete(resources.STACK, "prog", ns)
    await wait_gone(ckc, resources.STACK, "prog", ns, 300)
    await asyncio.gather(*(ckc.delete(resources.STACK, n, ns) for n in ("gitstack", FAILING)))
    for name in ("gitstack", FAILING):
        await wait_gone(ckc, resources.STACK, name, ns, 120)
