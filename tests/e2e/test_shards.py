"""Sharding across operator processes (Flux's scheme), end to end: two `pko operator` processes on one control plane,
the default shard (`--watch-label-selector '!sharding.fluxcd.io/key'`) and shard `b` (`--shard-key b`), split a fleet
of 12 Stacks on one backend by the Stacks' `sharding.fluxcd.io/key` label. Each Stack is reconciled by exactly one
operator — by its Updates, by the operators' logs and by the API server's audit of who wrote its status. Relabelled
Stacks move to the other shard with their Workspace and Updates; a Stack relabelled while its Update runs waits for
that Update to finish where it started, and no operation runs twice."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import lightkube
import pytest
import stack_e2e as e2e

from pko.api import names
from pko.kube import client as kclient
from pko.kube import errors as kerrors
from pko.kube import objects, resources
from pko.runtime import sharding
from pko.testing import binaries, controlplane, gitserver, operator, ports
from pko.testing.waiting import condition, wait_for

FLEET = 12  # six a shard: enough to split, four of them to move (30 took 200 s of CPU, 12 take 110)
SHARD = names.LABEL_SHARD_KEY
DEFAULT_UA = "selector !sharding.fluxcd.io/key"
B_UA = "shard b"


@contextlib.contextmanager
def _control_plane(workdir: Path, audit: Path) -> Iterator[controlplane.ControlPlane]:
    try:
        cp = controlplane.start(workdir, audit_log=audit)
    except Exception as err:  # a broken test bed fails the test, never skips it
        pytest.fail(f"could not start the control plane: {err}", pytrace=False)
    with cp:
        yield cp


@contextlib.asynccontextmanager
async def _operator(cp: controlplane.ControlPlane, root: Path, env: dict[str, str], *flags: str
                    ) -> AsyncIterator[Path]:
    """A `pko operator` process with `flags`, logging JSON lines to the file it yields; stopped with SIGTERM."""
    root.mkdir(parents=True)
    log_path = root / "operator.log"
    health = ports.free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(  # noqa: ASYNC220 (spawning does not block; waits go through to_thread)
            [sys.executable, "-m", "pko", "operator", "--kubeconfig", str(cp.kubeconfig),
             "--workspace-runtime", "local", "--workspace-root", str(root / "workspaces"),
             "--health-probe-bind-address", f"127.0.0.1:{health}",
             "--program-fs-addr", f"127.0.0.1:{ports.free_port()}", "--zap-encoder", "json", *flags],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            yield log_path
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(process.wait, 90)
            finally:
                if process.poll() is None:
                    process.kill()
    assert process.returncode == 0, log_path.read_text()[-3000:]


def _apply_shard_policy(cp: controlplane.ControlPlane) -> None:
    """Install the chart's admission policy for a chart with the one shard `b`."""
    chart = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "pko"
    rendered = subprocess.run(
        [str(binaries.require("helm")), "template", "pko", str(chart), "--set", "sharding.shards={b}",
         "--show-only", "templates/sharding.yaml"], capture_output=True, text=True, timeout=120, check=True).stdout
    subprocess.run([str(binaries.require("kubectl")), "--kubeconfig", str(cp.kubeconfig), "apply", "-f", "-"],
                   input=rendered, capture_output=True, text=True, timeout=120, check=True)


async def _shard_policy(cp: controlplane.ControlPlane, kc: kclient.Client, namespace: str) -> None:
    """Install the chart's admission policy, and see the API server refuse a label naming no shard."""
    await asyncio.to_thread(_apply_shard_policy, cp)
    stray = resources.STACK.new("stray", namespace, spec={"stack": "stray", "programRef": {"name": "fleet"}})
    stray["metadata"]["labels"] = {SHARD: "c"}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30  # the API server compiles a new policy within a second or so
    refused = ""
    while not refused:
        try:
            await kc.create(stray)
        except kerrors.ApiError as err:
            refused = str(err)
            break
        await kc.delete(resources.STACK, "stray", namespace)
        assert loop.time() < deadline, "the admission policy never refused a Stack of shard c"
        await asyncio.sleep(0.5)
    assert 'label sharding.fluxcd.io/key: "c" names no shard of this operator (its shards: b)' in refused


def _stack(name: str, namespace: str, backend: Path, shard: str | None, **spec: Any) -> dict[str, Any]:
    obj = resources.STACK.new(name, namespace, spec={
        "stack": name, "programRef": {"name": "fleet"}, "backend": f"file://{backend}",
        "envRefs": {"PULUMI_CONFIG_PASSPHRASE": {"type": "Literal", "literal": {"value": "shards"}}}, **spec})
    if shard is not None:
        obj["metadata"]["labels"] = {SHARD: shard}
    return obj


def _audit(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _writers(audit: list[dict[str, Any]], namespace: str, resource: str, subresource: str | None,
             verbs: set[str]) -> dict[str, list[tuple[datetime.datetime, str]]]:
    """Per object name: (time, which operator) of each request of `verbs` to it, in the order they came."""
    found: dict[str, list[tuple[datetime.datetime, str]]] = collections.defaultdict(list)
    for event in audit:
        ref = event.get("objectRef") or {}
        if (ref.get("namespace") != namespace or ref.get("resource") != resource
                or ref.get("subresource") != subresource or event.get("verb") not in verbs):
            continue
        agent = event.get("userAgent", "")
        who = "b" if B_UA in agent else "default" if DEFAULT_UA in agent else None
        if who is None or (event.get("responseStatus") or {}).get("code", 200) >= 300:
            continue
        found[ref.get("name") or ""].append((datetime.datetime.fromisoformat(event["requestReceivedTimestamp"]), who))
    return found


def _worked_on(log: Path, namespace: str, stacks: set[str]) -> set[str]:
    """The Stacks whose Workspace, Updates or Stack the operator writing `log` worked on (its lines carry the name
    of the object each controller reconciles; an Update's name begins with its Stack's)."""
    found = set()
    for line in log.read_text().splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            name = str(entry.get("name") or "")
            if entry.get("namespace") != namespace:
                continue
            if entry.get("controller") == names.UPDATE_CONTROLLER:
                name = next((s for s in stacks if names.update_name_millis(s, name)), "")
            if name in stacks:
                found.add(name)
    return found


async def _ready_at(kc: kclient.Client, name: str, namespace: str, generation: int) -> dict[str, Any]:
    return await wait_for(kc, resources.STACK, name, namespace, lambda o: e2e.is_ready(o) and (
        (o.get("status") or {}).get("observedGeneration") == generation), timeout=300)


async def test_two_shards_split_a_fleet_and_relabelled_stacks_move_once(
    tmp_path: Path, git: gitserver.GitServer, pulumi_env: dict[str, str],
) -> None:
    audit_log = tmp_path / "audit" / "audit.log"
    with _control_plane(tmp_path / "cp", audit_log) as cp:
        async with kclient.Client.connect(lightkube.KubeConfig.from_file(str(cp.kubeconfig))) as kc:
            await operator.install_crds(kc)
            await operator.install_identity(kc)
            namespace = "fleet"
            await kc.create(resources.NAMESPACE.new(namespace))
            await _shard_policy(cp, kc, namespace)
            backend = tmp_path / "state"
            backend.mkdir()
            await kc.create(resources.PROGRAM.new("fleet", namespace, program={
                "configuration": {"size": {"type": "String", "default": "small"}},
                "outputs": {"size": "${size}"}}))
            shard_of = {f"s{i:02d}": "b" if i % 2 else None for i in range(FLEET)}
            slow_repo = git.create_repo("slow-shards", {"Pulumi.yaml": "name: slow\nruntime: python\n",
                                                        "__main__.py": e2e.SLOW_PROGRAM})
            release = tmp_path / "release"

            async with (_operator(cp, tmp_path / "default", dict(pulumi_env),
                                  "--watch-label-selector", f"!{SHARD}") as default_log,
                        _operator(cp, tmp_path / "b", dict(pulumi_env), "--shard-key", "b") as b_log):
                for name, shard in shard_of.items():
                    await kc.create(_stack(name, namespace, backend, shard))
                await kc.create(resources.STACK.new("slow", namespace, spec={
                    "stack": "slow", "projectRepo": git.http_url("slow-shards"), "commit": slow_repo,
                    "backend": f"file://{backend}", "config": {"release": str(release)},
                    "envRefs": {"PULUMI_CONFIG_PASSPHRASE": {"type": "Literal", "literal": {"value": "slow"}}}}))
                for name in shard_of:
                    stack = await _ready_at(kc, name, namespace, 1)
                    assert stack["status"]["outputs"] == {"size": "small"}

                # The slow Stack's first Update runs in the default shard; relabel it to shard b meanwhile.
                running = await wait_for(kc, resources.STACK, "slow", namespace,
                                         lambda o: bool((o.get("status") or {}).get("currentUpdate")), timeout=240)
                first = running["status"]["currentUpdate"]["name"]
                moved_at = datetime.datetime.now(datetime.UTC)
                await kc.patch(resources.STACK, "slow", {"metadata": {"labels": {SHARD: "b"}}}, namespace)
                waiting = await wait_for(kc, resources.STACK, "slow", namespace, lambda o: "moving to this shard" in (
                    condition(o, "Reconciling").get("message") or ""))
                assert first in condition(waiting, "Reconciling")["message"]
                workspace = await kc.get(resources.WORKSPACE, "slow", namespace)
                assert SHARD not in objects.labels_of(workspace), "the Workspace moved while its Update ran"
                release.write_text("go")
                slow = await wait_for(kc, resources.STACK, "slow", namespace, lambda o: e2e.is_ready(o) and (
                    e2e.last_update(o).get("name") == first), timeout=240)
                assert slow["status"]["outputs"] == {"done": True}
                workspace = await wait_for(kc, resources.WORKSPACE, "slow", namespace,
                                           lambda o: objects.labels_of(o).get(SHARD) == "b")
                update = await kc.get(resources.UPDATE, first, namespace)
                assert objects.labels_of(update).get(SHARD) == "b"

                # Four idle Stacks change shard, each with a spec change that needs an Update in its new shard.
                movers = {"s00": "b", "s02": "b", "s01": None, "s03": None}
                for name, target in movers.items():
                    await kc.patch(resources.STACK, name, {"metadata": {"labels": {SHARD: target}},
                                                           "spec": {"config": {"size": "large"}}}, namespace)
                for name in movers:
                    stack = await _ready_at(kc, name, namespace, 2)
                    assert stack["status"]["outputs"] == {"size": "large"}
                    workspace = await kc.get(resources.WORKSPACE, name, namespace)
                    assert objects.labels_of(workspace).get(SHARD) == movers[name]
                moves = await e2e.events_with(kc, "s00", namespace, "ShardMoved")
                assert "to shard b" in moves[0]["message"]

            # Every Update ran once, where its Stack was; none failed; the slow Stack ran one.
            for name in [*shard_of, "slow"]:
                updates = await e2e.updates_of(kc, name, namespace)
                expected = 1 if name == "slow" or name not in movers else 2
                assert len(updates) == expected, (name, [objects.name_of(u) for u in updates])
                for update in updates:
                    assert condition(update, "Failed").get("status") != "True", (name, update.get("status"))

    audit = _audit(audit_log)
    status = _writers(audit, namespace, "stacks", "status", {"patch", "update"})
    created = _writers(audit, namespace, "updates", None, {"create"})
    assert created, "the audit log names no Update creation"
    owner = {name: shard or "default" for name, shard in shard_of.items()}
    target = {name: shard or "default" for name, shard in movers.items()}

    def creators(stack: str) -> list[str]:
        return sorted(who for update, found in created.items() if names.update_name_millis(stack, update)
                      for _, who in found)

    for name in shard_of:
        sequence = [who for _, who in status[name]]
        assert sequence, f"nobody wrote the status of {name}"
        if name in movers:  # the old shard until the move, the new one after it, never both in turns
            switch = sequence.index(target[name])
            assert set(sequence[:switch]) == {owner[name]}, (name, sequence)
            assert set(sequence[switch:]) == {target[name]}, (name, sequence)
            assert creators(name) == sorted([owner[name], target[name]]), (name, creators(name))
        else:
            assert set(sequence) == {owner[name]}, (name, sequence)
            assert creators(name) == [owner[name]], (name, creators(name))
    assert creators("slow") == ["default"]
    late = {who for when, who in status["slow"] if when > moved_at + datetime.timedelta(seconds=1)}
    assert late == {"b"}, status["slow"]

    everyone = {*shard_of, "slow"}
    in_default, in_b = _worked_on(default_log, namespace, everyone), _worked_on(b_log, namespace, everyone)
    for name, shard in owner.items():
        if name in movers:
            assert name in in_default
            assert name in in_b
        else:
            assert (name in in_default, name in in_b) == (shard == "default", shard == "b"), name


CUSTOM_LEASE = sharding.shard(watch_label_selector="team=b").lease_name("operator.pulumi.com")


@pytest.mark.parametrize(("old", "new", "lease", "moved_from_to"), [
    pytest.param(("--shard-key", "b", {SHARD: "b"}), (f"!{SHARD}", {SHARD: None}), "operator.pulumi.com-b",
                 "from shard b to the default shard", id="shard-label"),
    # a custom selector's Workspace carries no shard label: only its annotation names the Lease to ask
    pytest.param(("--watch-label-selector", "team=b", {"team": "b"}), ("team=a", {"team": "a"}), CUSTOM_LEASE,
                 f"from the operator of Lease {CUSTOM_LEASE} to the operator watching team=a", id="custom-selector"),
])
async def test_a_stack_moved_out_of_a_shard_that_is_gone_takes_its_running_update_over(
    tmp_path: Path, git: gitserver.GitServer, pulumi_env: dict[str, str], old: tuple[str, str, dict[str, str]],
    new: tuple[str, dict[str, str | None]], lease: str, moved_from_to: str,
) -> None:
    """Shard b stops (taken out of the chart) while its Stack's Update runs, and the Stack is relabelled to the
    default shard: the default shard sees b's Lease released, takes the Workspace and the interrupted Update over,
    says so, and the Stack runs again there instead of waiting for ever. The same between two operators of custom
    selectors (team=b to team=a)."""
    with _control_plane(tmp_path / "cp", tmp_path / "audit" / "audit.log") as cp:
        async with kclient.Client.connect(lightkube.KubeConfig.from_file(str(cp.kubeconfig))) as kc:
            await operator.install_crds(kc)
            await operator.install_identity(kc)
            namespace = "gone"
            await kc.create(resources.NAMESPACE.new(namespace))
            backend = tmp_path / "state"
            backend.mkdir()
            commit = git.create_repo("slow-gone", {"Pulumi.yaml": "name: slow\nruntime: python\n",
                                                   "__main__.py": e2e.SLOW_PROGRAM})
            release = tmp_path / "release"
            elect = ("--leader-elect", "--leader-election-lease-duration", "15s",
                     "--leader-election-renew-deadline", "10s", "--leader-election-retry-period", "2s")
            async with _operator(cp, tmp_path / "default", dict(pulumi_env), "--watch-label-selector", new[0],
                                 *elect) as default_log:
                async with _operator(cp, tmp_path / "b", dict(pulumi_env), old[0], old[1], *elect):
                    stack = resources.STACK.new("slow", namespace, spec={
                        "stack": "slow", "projectRepo": git.http_url("slow-gone"), "commit": commit,
                        "backend": f"file://{backend}", "config": {"release": str(release)},
                        "envRefs": {"PULUMI_CONFIG_PASSPHRASE": {"type": "Literal", "literal": {"value": "slow"}}}})
                    stack["metadata"]["labels"] = dict(old[2])
                    await kc.create(stack)
                    running = await wait_for(kc, resources.STACK, "slow", namespace, lambda o: bool(
                        (o.get("status") or {}).get("currentUpdate")), timeout=240)
                    first = running["status"]["currentUpdate"]["name"]
                    await wait_for(kc, resources.UPDATE, first, namespace,
                                   lambda u: condition(u, "Progressing").get("status") == "True", timeout=120)
                # shard b's operator stopped mid-Update: its Lease is released, its Update left Progressing
                held = await kc.get(resources.LEASE, lease, operator.DEFAULT_NAMESPACE)
                assert not held["spec"].get("holderIdentity"), held["spec"]
                assert condition(await kc.get(resources.UPDATE, first, namespace), "Complete").get("status") != "True"

                await kc.patch(resources.STACK, "slow", {"metadata": {"labels": new[1]}}, namespace)
                moved = await e2e.events_with(kc, "slow", namespace, "ShardMoved", timeout=120)
                message = moved[0]["message"]
                assert moved[0]["type"] == "Warning"
                assert moved_from_to in message
                assert f"its Lease {lease} has no holder" in message
                assert f"Update {first}, which ran there, is taken over" in message
                release.write_text("go")
                done = await wait_for(kc, resources.STACK, "slow", namespace, lambda o: e2e.is_ready(o) and (
                    e2e.last_update(o).get("name") not in (None, first)), timeout=300)
                assert done["status"]["outputs"] == {"done": True}
                interrupted = await kc.get(resources.UPDATE, first, namespace)
                assert condition(interrupted, "Complete").get("status") == "True"
                assert condition(interrupted, "Failed").get("status") == "True", interrupted.get("status")
                relabelled = objects.labels_of(await kc.get(resources.WORKSPACE, "slow", namespace))
                for key, value in new[1].items():
                    assert objects.labels_of(interrupted).get(key) == value
                    assert relabelled.get(key) == value
            assert "is taken over as an operation its operator's end interrupted" in default_log.read_text()


async def test_operators_with_custom_watch_selectors_run_their_own_stacks_and_a_relabelled_one_moves(
    cluster: controlplane.ControlPlane, kc: kclient.Client, namespace: str, tmp_path: Path,
    pulumi_env: dict[str, str],
) -> None:
    """`--watch-label-selector team=a` / `team=b` (Flux's flag with any selector, not only the shard label): each
    operator runs the Stacks its selector picks, whose Workspaces and Updates carry the `team` label so that its
    own watches see them too; a Stack relabelled to the other team moves there with them and runs there."""
    backend = tmp_path / "state"
    backend.mkdir()
    program = resources.PROGRAM.new("teams", namespace, program={
        "configuration": {"size": {"type": "String", "default": "small"}}, "outputs": {"size": "${size}"}})
    program["metadata"]["labels"] = {"team": "a"}  # served by the operator of team a
    await kc.create(program)

    def team_stack(name: str, team: str) -> dict[str, Any]:
        obj = _stack(name, namespace, backend, None)
        obj["spec"]["programRef"] = {"name": "teams"}
        obj["metadata"]["labels"] = {"team": team, "app": "web"}
        return obj

    async with (_operator(cluster, tmp_path / "a", dict(pulumi_env), "--watch-label-selector", "team=a") as a_log,
                _operator(cluster, tmp_path / "b", dict(pulumi_env), "--watch-label-selector", "team=b") as b_log):
        await kc.create(team_stack("ta", "a"))
        await kc.create(team_stack("tb", "b"))
        for name, team in (("ta", "a"), ("tb", "b")):
            stack = await _ready_at(kc, name, namespace, 1)
            assert stack["status"]["outputs"] == {"size": "small"}
            workspace = await kc.get(resources.WORKSPACE, name, namespace)
            assert objects.labels_of(workspace).get("team") == team
            assert "app" not in objects.labels_of(workspace)  # only what the selector looks at is carried
            for update in await e2e.updates_of(kc, name, namespace):
                assert objects.labels_of(update).get("team") == team
        assert _worked_on(a_log, namespace, {"ta", "tb"}) == {"ta"}
        assert _worked_on(b_log, namespace, {"ta", "tb"}) == {"tb"}

        # ta goes to team b, with a change that needs an Update there
        await kc.patch(resources.STACK, "ta", {"metadata": {"labels": {"team": "b"}},
                                              "spec": {"config": {"size": "large"}}}, namespace)
        stack = await _ready_at(kc, "ta", namespace, 2)
        assert stack["status"]["outputs"] == {"size": "large"}
        workspace = await kc.get(resources.WORKSPACE, "ta", namespace)
        assert objects.labels_of(workspace).get("team") == "b"
        updates = await e2e.updates_of(kc, "ta", namespace)
        assert len(updates) == 2, [objects.name_of(u) for u in updates]
        assert {objects.labels_of(u).get("team") for u in updates} == {"b"}
        moves = await e2e.events_with(kc, "ta", namespace, "ShardMoved")
        assert moves, "no ShardMoved event"
    assert "ta" in _worked_on(b_log, namespace, {"ta"})
