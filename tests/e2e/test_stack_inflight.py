"""A Stack never runs two Updates at once: a reconcile that arrives while its Update is in flight (here, a sync
request) waits for that Update to finish, and is honoured by the next one. And an Update the Stack names but that
was never created does not hold the Stack for ever."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
import stack_e2e as e2e

from pko.api import names
from pko.kube import client as kclient
from pko.kube import errors, objects, resources
from pko.testing import gitserver, operator
from pko.testing.waiting import condition, reconciles, settled, wait_for


async def _slow_stack_running(kc: kclient.Client, git: gitserver.GitServer, name: str, namespace: str,
                              tmp_path: Path) -> tuple[dict[str, Any], Path]:
    """A Stack of SLOW_PROGRAM, once it has a current Update; and the file that releases the program."""
    repo = f"{name}-{namespace}"
    commit = git.create_repo(repo, {"Pulumi.yaml": f"name: {name}\nruntime: python\n", "__main__.py": e2e.SLOW_PROGRAM})
    backend, release = tmp_path / "state", tmp_path / "release"
    backend.mkdir()
    await kc.create(resources.STACK.new(name, namespace, spec={
        "stack": "dev", "projectRepo": git.http_url(repo), "commit": commit, "backend": f"file://{backend}",
        "config": {"release": str(release)},
        "envRefs": {"PULUMI_CONFIG_PASSPHRASE": {"type": "Literal", "literal": {"value": name}}},
    }))
    running = await wait_for(kc, resources.STACK, name, namespace,
                             lambda o: bool((o.get("status") or {}).get("currentUpdate")), timeout=240)
    return running, release


async def test_a_request_during_an_update_waits_for_it(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator, tmp_path: Path,
) -> None:
    running, release = await _slow_stack_running(kc, git, "slow", namespace, tmp_path)
    first = running["status"]["currentUpdate"]["name"]

    registry = stack_operator.manager.registry
    before = reconciles(registry, names.STACK_CONTROLLER)
    await kc.patch(resources.STACK, "slow", {"metadata": {"annotations": {
        "pulumi.com/reconciliation-request": "while-running"}}}, namespace)
    # The operator saw the request (it records it at once) and finished that reconcile: had it started a second
    # Update, it would be there now.
    seen = await wait_for(kc, resources.STACK, "slow", namespace,
                          lambda o: (o.get("status") or {}).get("observedReconcileRequest") == "while-running",
                          timeout=60, interval=0.1)
    assert (seen["status"].get("currentUpdate") or {}).get("name") == first, "the Update finished too soon"
    await settled(registry, names.STACK_CONTROLLER, after=before)
    updates = (await kc.list(resources.UPDATE, namespace)).items
    in_flight = [u for u in updates if condition(u, "Complete").get("status") != "True"]
    assert [objects.name_of(u) for u in in_flight] == [first], "a second Update started while one was running"
    release.touch()  # the first Update may finish now; the next one runs without waiting

    done = await wait_for(kc, resources.STACK, "slow", namespace, lambda o: (
        condition(o, "Ready").get("status") == "True"
        and ((o.get("status") or {}).get("lastUpdate") or {}).get("reconcileRequest") == "while-running"),
        timeout=300)
    assert done["status"]["lastUpdate"]["name"] != first
    assert done["status"]["outputs"] == {"done": True}


async def test_a_current_update_that_was_never_created_is_given_up(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
) -> None:
    """An operator interrupted between naming its next Update in the Stack's status and creating it (a SIGKILL, an
    API outage, a lost Lease) leaves a `currentUpdate` with no object: the next reconcile gives it up (with an
    `UpdateLost` event) and runs a new Update, instead of waiting for it for ever."""
    repo = f"lost-{namespace}"
    commit = e2e.create_repo(git, repo, marker="v1")
    await kc.create(e2e.git_stack("lost", namespace, git.http_url(repo), commit=commit))
    ready = await wait_for(kc, resources.STACK, "lost", namespace, e2e.is_ready, timeout=240)

    named = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=2)
    lost = names.update_name("lost", int(named.timestamp() * 1000))
    await kc.patch(resources.STACK, "lost", {"status": {"currentUpdate": {
        "name": lost, "generation": ready["metadata"]["generation"], "commit": commit}}}, namespace, status=True)
    await e2e.request_reconcile(kc, "lost", namespace, "after-the-loss")
    done = await wait_for(kc, resources.STACK, "lost", namespace, lambda o: (
        e2e.is_ready(o) and e2e.last_update(o).get("reconcileRequest") == "after-the-loss"), timeout=240)
    assert e2e.last_update(done)["name"] != lost
    assert e2e.last_update(done)["state"] == "succeeded"
    assert await kc.get_or_none(resources.UPDATE, lost, namespace) is None
    events = await e2e.events_of(kc, "lost", namespace)
    assert [(e["type"], lost in e["message"]) for e in events if e["reason"] == "UpdateLost"] == [("Warning", True)]


async def test_an_update_whose_spec_changed_while_it_ran_does_not_wedge_its_stack(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator, tmp_path: Path,
) -> None:
    """PKO#1292: the Update's spec changes while it runs (a person or a tool edits it), so it finishes with a
    status of the generation it started at. A finished Update never runs again: the Stack takes its result, says
    so with an `UpdateUnobserved` event, and is Ready — instead of waiting for ever for a status of the new
    generation, looking healthy."""
    running, release = await _slow_stack_running(kc, git, "edited", namespace, tmp_path)
    name = running["status"]["currentUpdate"]["name"]
    await wait_for(kc, resources.UPDATE, name, namespace,
                   lambda o: condition(o, "Progressing").get("status") == "True", timeout=120)
    edited = await kc.patch(resources.UPDATE, name, {"spec": {"ttlAfterCompleted": "48h0m0s"}}, namespace)
    assert edited["metadata"]["generation"] == 2
    release.touch()

    finished = await wait_for(kc, resources.UPDATE, name, namespace,
                              lambda o: condition(o, "Complete").get("status") == "True", timeout=120)
    assert finished["status"]["observedGeneration"] == 1  # the generation it ran
    done = await wait_for(kc, resources.STACK, "edited", namespace, lambda o: (
        condition(o, "Ready").get("status") == "True" and not (o.get("status") or {}).get("currentUpdate")),
        timeout=60)
    assert done["status"]["lastUpdate"]["name"] == name
    assert done["status"]["lastUpdate"]["state"] == "succeeded"
    assert done["status"]["outputs"] == {"done": True}
    said = await e2e.events_with(kc, "edited", namespace, "UpdateUnobserved")
    assert f"Update {name} finished, but its spec changed after it started (generation 2" in said[0]["message"]


async def test_an_update_created_behind_a_lost_answer_is_followed_not_made_twice(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The API server makes the Update but its answer is lost (a 504 from a proxy, a timeout, a dropped
    connection). The Stack keeps the name it saved and follows that Update; it never takes the error for a refusal
    and starts a second Update beside the first (two `up`s of one generation)."""
    real = kclient.Client.create
    lost: list[str] = []

    async def create(self: kclient.Client, obj: dict[str, Any]) -> dict[str, Any]:
        made = await real(self, obj)
        if obj.get("kind") == "Update" and not lost:
            lost.append(objects.name_of(made))
            raise errors.from_status(504, "Timeout", "the answer was lost after the write")
        return made
    monkeypatch.setattr(kclient.Client, "create", create)  # the operator's client (and its cached one) alike

    repo = f"answer-{namespace}"
    commit = e2e.create_repo(git, repo, marker="v1")
    await kc.create(e2e.git_stack("answer", namespace, git.http_url(repo), commit=commit))
    done = await wait_for(kc, resources.STACK, "answer", namespace, e2e.is_ready, timeout=240)
    assert lost, "no Update was created"
    assert e2e.last_update(done)["name"] == lost[0]
    made = (await kc.list(resources.UPDATE, namespace, labels={names.LABEL_STACK_NAME: "answer"})).items
    assert [objects.name_of(u) for u in made] == lost, "a second Update was made beside the first"
