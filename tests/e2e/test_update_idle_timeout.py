"""An operation that goes silent is cancelled (`Update.spec.idleTimeout`, the operator's `--update-idle-timeout`; the
reference's names from its PR#1296), end to end on the real control plane with the real Pulumi CLI.

The program blocks without output (no engine event) until the test releases it. With a 4-second idle timeout from
the Stack's `updateTemplate`, its Update fails with reason `IdleTimeout` and a message that names the timeout; the
Stack records the failure as any other; and the stack's lock was released (the CLI was cancelled, not killed), so
the retry that follows — the program released — succeeds instead of finding the stack locked. An operation that
keeps talking is not cancelled however long it runs — unless it passes its hard deadline (pko's `spec.timeout`,
`--update-timeout`): then it is cancelled, output or not, with reason `DeadlineExceeded`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import stack_e2e as e2e

from pko.kube import client as kclient
from pko.kube import errors, resources
from pko.testing import gitserver, operator, podprocs
from pko.testing.waiting import condition, wait_for

# Silent until the `release` file exists, then done. With `chatty`, a chain of 32 resources instead, each created
# in half a second after the previous one: about 16 s in all, with engine events all along.
PROGRAM = """import os
import time

import pulumi
from pulumi.dynamic import CreateResult, Resource, ResourceProvider


class Tick(ResourceProvider):
    def create(self, props):
        time.sleep(0.5)
        return CreateResult(id_=props["n"], outs=props)


class Ticked(Resource):
    def __init__(self, name, props):
        super().__init__(Tick(), name, props)


config = pulumi.Config()
if config.get_bool("chatty"):
    previous = ""
    for n in range(32):
        previous = Ticked(f"tick-{n}", {"n": str(n), "after": previous}).id
else:
    release = config.require("release")
    deadline = time.monotonic() + 600
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.5)
pulumi.export("done", True)
"""


def _results(backend: Path) -> list[str]:
    """The results of the `up`s the backend recorded as over."""
    entries = [json.loads(p.read_text()) for p in (backend / ".pulumi" / "history").rglob("*.history.json")]
    return [str(e.get("result")) for e in entries if e.get("kind") == "update"]


async def _create(kc: kclient.Client, git: gitserver.GitServer, namespace: str, tmp_path: Path, name: str, *,
                  chatty: bool = False, limits: dict[str, str] | None = None) -> tuple[Path, Path]:
    """A repository of PROGRAM and a Stack `name` of it; the Stack's backend directory and the file that releases
    a silent program."""
    repo = f"{name}-{namespace}"
    commit = git.create_repo(repo, {"Pulumi.yaml": f"name: {name}\nruntime: python\n", "__main__.py": PROGRAM})
    backend, release = tmp_path / "state", tmp_path / "release"
    backend.mkdir()
    await kc.create(_stack(name, namespace, git.http_url(repo), commit, backend, release, chatty, limits))
    return backend, release


def _stack(name: str, namespace: str, url: str, commit: str, backend: Path, release: Path,
           chatty: bool, limits: dict[str, str] | None) -> dict[str, object]:
    return resources.STACK.new(name, namespace, spec={
        "stack": "dev", "projectRepo": url, "commit": commit, "backend": f"file://{backend}",
        "config": {"release": str(release), "chatty": "true" if chatty else "false"},
        "envRefs": {"PULUMI_CONFIG_PASSPHRASE": {"type": "Literal", "literal": {"value": "idle"}}},
        # retried every 20 s until the test releases the program: long enough for the test to look at the CLIs
        # still running once an attempt failed, before the next one starts its own; and on a loaded machine
        # several silent attempts can pass before the release, which the default maxFailures (3) would stall on
        "retryPolicy": {"backoffBaseSeconds": 20, "backoffFactor": 1, "maxFailures": 100},
        "updateTemplate": {"spec": limits or {"idleTimeout": "4s"}},
    })


async def test_a_silent_operation_is_cancelled_and_leaves_the_stack_unlocked(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator, tmp_path: Path,
) -> None:
    backend, release = await _create(kc, git, namespace, tmp_path, "silent")

    def failed_silent(obj: dict[str, object]) -> bool:
        return condition(obj, "Failed").get("reason") == "IdleTimeout"

    update = None
    for _ in range(2):  # the first Update of the Stack, then its retries: find one that timed out
        found = await kc.list(resources.UPDATE, namespace)
        update = next((u for u in found.items if failed_silent(u)), None)
        if update is not None:
            break
        await wait_for(kc, resources.STACK, "silent", namespace,
                       lambda o: e2e.last_update(o).get("state") == "failed", timeout=240)
    assert update is not None
    assert condition(update, "Failed")["message"] == (
        "the up sent no output for 4s and was cancelled (spec.idleTimeout, or the operator's --update-idle-timeout)")
    assert update["spec"]["idleTimeout"] == "4s"
    stack = await kc.get(resources.STACK, "silent", namespace)
    assert "sent no output for 4s" in e2e.last_update(stack)["message"]
    assert e2e.last_update(stack)["state"] == "failed"
    # The operator had the agent stop that `up` (pko's agent keeps an `up` running when only its call goes away:
    # OperationControl.Cancel) and waited for it: no CLI of this Stack runs now, though its program still blocks.
    # (Whether the backend recorded it depends on how far the CLI had got in 4 s: on a loaded machine the timeout
    # can pass while the language host starts, before the CLI opened an update — CI saw it.)
    assert not podprocs.running_with_env("up", "PULUMI_BACKEND_URL", f"file://{backend}"), (
        "the timed-out up is still running in the agent")
    assert set(_results(backend)) <= {"failed"}

    # The program may finish now: the retry succeeds, so the cancelled CLI left the stack unlocked.
    release.touch()
    done = await wait_for(kc, resources.STACK, "silent", namespace, e2e.is_ready, timeout=240)
    assert e2e.last_update(done)["state"] == "succeeded"
    assert done["status"]["outputs"] == {"done": True}
    assert not list((backend / ".pulumi" / "locks").rglob("*.json")), "a lock was left behind"


async def test_an_operation_that_keeps_talking_runs_past_the_idle_timeout(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator, tmp_path: Path,
) -> None:
    # 12 s: longer than any pause between the engine's events, also while the language host starts on a loaded
    # machine (4 s was not: CI saw the start alone pass it), and shorter than the run
    await _create(kc, git, namespace, tmp_path, "chatty", chatty=True, limits={"idleTimeout": "12s"})
    done = await wait_for(kc, resources.STACK, "chatty", namespace, e2e.is_ready, timeout=240)
    assert e2e.last_update(done)["state"] == "succeeded"
    updates = await e2e.updates_of(kc, "chatty", namespace)
    assert len(updates) == 1  # the first one: it ran past its idle timeout and was not cancelled
    started, ended = (e2e.timestamp(updates[0]["status"][k]) for k in ("startTime", "endTime"))
    assert (ended - started).total_seconds() > 12


async def test_an_operation_past_its_deadline_is_cancelled_though_it_talks(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator, tmp_path: Path,
) -> None:
    backend, _ = await _create(kc, git, namespace, tmp_path, "endless", chatty=True,
                               limits={"idleTimeout": "0s", "timeout": "3s"})
    failed = await wait_for(kc, resources.STACK, "endless", namespace,
                            lambda o: e2e.last_update(o).get("state") == "failed", timeout=240)
    update = await kc.get(resources.UPDATE, e2e.last_update(failed)["name"], namespace)
    assert condition(update, "Failed")["reason"] == "DeadlineExceeded"
    assert condition(update, "Failed")["message"] == (
        "the up ran for longer than 3s and was cancelled (spec.timeout, or the operator's --update-timeout)")
    assert "ran for longer than 3s" in e2e.last_update(failed)["message"]

    # Without the deadline the same program finishes: the cancelled CLI left the stack unlocked.
    await kc.patch(resources.STACK, "endless", {"spec": {"updateTemplate": {"spec": {"timeout": "0s"}}}}, namespace)
    done = await wait_for(kc, resources.STACK, "endless", namespace, e2e.is_ready, timeout=240)
    assert done["status"]["outputs"] == {"done": True}
    assert not list((backend / ".pulumi" / "locks").rglob("*.json")), "a lock was left behind"


@pytest.mark.parametrize("value", ["half an hour", "-5m", "30", "1d"])
async def test_a_meaningless_idle_timeout_is_refused(kc: kclient.Client, namespace: str, value: str) -> None:
    update = resources.UPDATE.new("bad-idle", namespace, spec={"workspaceName": "w", "stackName": "dev",
                                                               "type": "up", "idleTimeout": value})
    with pytest.raises(errors.ApiError) as refused:
        await kc.create(update)
    assert "spec.idleTimeout: Invalid value" in refused.value.message
    assert "idleTimeout must be a duration such as 30m, 2h or 90s" in refused.value.message


async def test_a_meaningless_deadline_is_refused(kc: kclient.Client, namespace: str) -> None:
    update = resources.UPDATE.new("bad-deadline", namespace, spec={"workspaceName": "w", "stackName": "dev",
                                                                   "type": "up", "timeout": "six hours"})
    with pytest.raises(errors.ApiError) as refused:
        await kc.create(update)
    assert "spec.timeout: Invalid value" in refused.value.message
    assert "timeout must be a duration such as 6h, 90m or 1h30m" in refused.value.message
    stored = await kc.create(resources.UPDATE.new("deadline", namespace, spec={
        "workspaceName": "w", "stackName": "dev", "type": "up", "timeout": "1h30m"}))
    assert stored["spec"]["timeout"] == "1h30m"


async def test_meaningful_idle_timeouts_are_stored(kc: kclient.Client, namespace: str) -> None:
    for index, value in enumerate(("0", "0s", "90s", "2h", "1h30m")):
        created = await kc.create(resources.UPDATE.new(f"idle-{index}", namespace, spec={
            "workspaceName": "w", "stackName": "dev", "type": "up", "idleTimeout": value}))
        assert created["spec"]["idleTimeout"] == value
