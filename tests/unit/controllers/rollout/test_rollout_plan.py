"""The StackRollout's rules (pko.controllers.rollout.plan), pass by pass against simulated Stacks: waves, concurrency,
bake and gates, rollback to the exact previous revision, failure-rate pauses, promote, pause, abort, one active rollout
per Stack, approvals, and a patch lost to a crash sent again."""

from __future__ import annotations

import copy
import datetime
from typing import Any

from pko.api import names
from pko.api import rollout as api
from pko.controllers.rollout import plan, revision

T0 = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=datetime.UTC)


def _stack(name: str, labels: dict[str, str], spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels, "generation": 1, "annotations": {}, "resourceVersion": "1"},
            "spec": spec or {"stack": f"dev/{name}", "projectRepo": "https://git/x", "branch": "main",
                             "config": {"version": "v1", "keep": "yes"}},
            "status": {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}],
                       "lastUpdate": {"state": "succeeded", "generation": 1}}}


class Fleet:
    """Stacks as the API server holds them; patches land as a merge patch does; `settle` plays the Stack
    controller (Ready, or failed, at the new generation)."""

    def __init__(self, stacks: list[dict[str, Any]]) -> None:
        self.stacks = {s["metadata"]["name"]: s for s in stacks}

    def views(self) -> list[plan.StackView]:
        return [plan.view(s) for s in self.stacks.values()]

    def apply(self, patches: list[plan.StackPatch]) -> list[str]:
        """Apply as the API server does: a patch whose resourceVersion is stale is refused (409); the names of the
        refused ones."""
        conflicts = []
        for patch in patches:
            obj = self.stacks[patch.name]
            wanted = patch.patch.get("metadata", {}).get("resourceVersion")
            if wanted is not None and wanted != obj["metadata"]["resourceVersion"]:
                conflicts.append(patch.name)
                continue
            obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
            annotations = patch.patch.get("metadata", {}).get("annotations", {})
            for key, value in annotations.items():
                if value is None:
                    obj["metadata"]["annotations"].pop(key, None)
                else:
                    obj["metadata"]["annotations"][key] = value
            spec = patch.patch.get("spec")
            if spec:
                before = copy.deepcopy(obj["spec"])
                _merge(obj["spec"], spec)
                if obj["spec"] != before:
                    obj["metadata"]["generation"] += 1
        return conflicts

    def settle(self, name: str, *, fail: bool = False) -> None:
        obj = self.stacks[name]
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
        gen = obj["metadata"]["generation"]
        obj["status"]["observedGeneration"] = gen
        obj["status"]["conditions"] = [{"type": "Ready", "status": "False" if fail else "True"}]
        obj["status"]["lastUpdate"] = {"state": "failed" if fail else "succeeded", "generation": gen}

    def settle_all(self) -> None:
        for name, obj in self.stacks.items():
            if obj["status"]["observedGeneration"] != obj["metadata"]["generation"]:
                self.settle(name)


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        elif isinstance(value, dict):
            target[key] = {}
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _rollout(**spec: Any) -> api.StackRollout:
    body: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "shop"}},
        "revision": {"config": {"version": "v2"}},
        "waves": [{"name": "dev", "selector": {"matchLabels": {"env": "dev"}}},
                  {"name": "staging", "selector": {"matchLabels": {"env": "staging"}}},
                  {"name": "prod", "percent": 100}],
    }
    body.update(spec)
    return api.StackRollout.model_validate({"metadata": {"name": "v2", "namespace": "ns", "generation": 1},
                                            "spec": body})


def _fleet() -> Fleet:
    return Fleet([_stack(f"{env}-{i}", {"app": "shop", "env": env}) for env in ("dev", "staging", "prod")
                  for i in (1, 2)] + [_stack("other", {"app": "blog", "env": "dev"})])


class Driver:
    """Runs passes the way the executor does: plan, keep the status, apply the patches."""

    def __init__(self, rollout: api.StackRollout, fleet: Fleet) -> None:
        self.rollout, self.fleet, self.now = rollout, fleet, T0
        self.events: list[plan.Event] = []

    def step(self, checks: dict[str, plan.GateCheck] | None = None, active: set[str] | None = None,
             seconds: float = 1, refused: dict[str, str] | None = None) -> plan.Plan:
        self.now += datetime.timedelta(seconds=seconds)
        result = plan.plan(self.rollout, self.fleet.views(), active_rollouts=active or set(), checks=checks or {},
                           now=self.now, refused=refused)
        self.rollout = self.rollout.model_copy(update={"status": result.status})
        self.fleet.apply(result.patches)
        self.events.extend(result.events)
        return result

    @property
    def status(self) -> api.StackRolloutStatus:
        assert self.rollout.status is not None
        return self.rollout.status

    def states(self) -> dict[str, str]:
        return {s.name: s.state for s in self.status.stacks or []}

    def reasons(self) -> list[str]:
        return [e.reason for e in self.events]


def test_waves_take_their_selectors_then_a_share_of_the_rest_and_other_stacks_are_left_alone() -> None:
    assigned, unassigned = plan.assign(_rollout(waves=[
        {"selector": {"matchLabels": {"env": "dev"}}}, {"percent": 50}, {"percent": 50}]).spec,  # type: ignore[arg-type]
        _fleet().views())
    assert [(s.name, s.wave) for s in assigned] == [
        ("dev-1", 0), ("dev-2", 0), ("prod-1", 1), ("prod-2", 1), ("staging-1", 1), ("staging-2", 2)]
    assert unassigned == 0
    _, unassigned = plan.assign(_rollout(waves=[{"selector": {"matchLabels": {"env": "dev"}}}]).spec,  # type: ignore[arg-type]
                                _fleet().views())
    assert unassigned == 4


def test_a_rollout_to_the_end_moves_wave_after_wave_and_releases_its_claims() -> None:
    fleet = _fleet()
    drive = Driver(_rollout(), fleet)
    drive.step()
    assert drive.status.phase == api.PROGRESSING
    assert all(fleet.stacks[n]["metadata"]["annotations"][names.ANNOTATION_ROLLOUT] == "v2"
               for n in ("dev-1", "staging-1", "prod-2"))
    assert names.ANNOTATION_ROLLOUT not in fleet.stacks["other"]["metadata"]["annotations"]
    # wave dev: both dev Stacks got the revision, nobody else
    assert [fleet.stacks[n]["spec"]["config"]["version"] for n in sorted(fleet.stacks)] == \
        ["v2", "v2", "v1", "v1", "v1", "v1", "v1"]
    assert fleet.stacks["dev-1"]["spec"]["config"]["keep"] == "yes"
    drive.step()
    assert drive.states()["dev-1"] == api.STACK_UPDATING
    fleet.settle_all()
    drive.step()  # dev done: bakes (no gates, no bake time) ...
    drive.step()  # ... and staging starts
    assert drive.states()["staging-1"] == api.STACK_UPDATING
    assert fleet.stacks["prod-1"]["spec"]["config"]["version"] == "v1"
    for _ in range(2):
        fleet.settle_all()
        drive.step()
        drive.step()
    fleet.settle_all()
    drive.step()
    drive.step()
    assert drive.status.phase == api.COMPLETED, drive.status.message
    assert drive.status.message == "6 of 6 Stacks at config version"
    assert all(fleet.stacks[n]["spec"]["config"]["version"] == "v2" for n in fleet.stacks if n != "other")
    assert all(names.ANNOTATION_ROLLOUT not in s["metadata"]["annotations"] for s in fleet.stacks.values())
    assert [w.phase for w in drive.status.waves or []] == [api.WAVE_SUCCEEDED] * 3
    ready = next(c for c in drive.status.conditions or [] if c.type == "Ready")
    assert (ready.status, ready.reason) == ("True", api.REASON_COMPLETED)
    assert drive.reasons().count(plan.EVENT_WAVE_COMPLETED) == 3
    assert drive.reasons()[-1] == plan.EVENT_COMPLETED


def test_max_concurrent_limits_the_stacks_updating_at_once() -> None:
    fleet = _fleet()
    drive = Driver(_rollout(waves=[{"percent": 100, "maxConcurrent": 2}]), fleet)
    drive.step()
    assert sorted(drive.states().values()).count(api.STACK_UPDATING) == 2
    fleet.settle("dev-1")
    drive.step()
    assert list(drive.states().values()).count(api.STACK_UPDATING) == 2
    assert list(drive.states().values()).count(api.STACK_SUCCEEDED) == 1


def _through_dev(drive: Driver, fleet: Fleet, gates: list[str]) -> None:
    drive.step()
    fleet.settle_all()
    drive.step()  # bake starts
    assert drive.status.phase == api.BAKING
    assert [g.name for g in plan.due_gates(drive.rollout, drive.now)] == gates


def test_a_wave_bakes_with_the_gates_checked_every_interval_until_the_bake_time_has_passed() -> None:
    fleet = _fleet()
    gate = {"name": "site", "http": {"url": "http://app/healthz"}, "interval": "10s"}
    drive = Driver(_rollout(gates=[gate], waves=[{"selector": {"matchLabels": {"env": "dev"}}, "bake": "30s"},
                                                 {"percent": 100}]), fleet)
    _through_dev(drive, fleet, ["site"])
    drive.step({"site": plan.GateCheck(True, "GET answered 200")})
    assert plan.due_gates(drive.rollout, drive.now) == []
    assert drive.status.phase == api.BAKING
    drive.step(seconds=10)
    assert [g.name for g in plan.due_gates(drive.rollout, drive.now)] == ["site"]
    drive.step({"site": plan.GateCheck(True, "ok")}, seconds=25)  # bake time passed, gate passing
    assert drive.states()["staging-1"] == api.STACK_UPDATING
    assert (drive.status.waves or [])[0].phase == api.WAVE_SUCCEEDED


def test_a_failed_gate_rolls_the_done_waves_back_to_their_exact_previous_revision_and_skips_the_rest() -> None:
    fleet = _fleet()
    fleet.stacks["staging-2"]["spec"]["config"].pop("version")  # absent before: removed again on rollback
    gate = {"name": "errors", "prometheus": {"address": "http://prom:9090", "query": "up"}, "failureLimit": 2}
    drive = Driver(_rollout(gates=[gate]), fleet)
    _through_dev(drive, fleet, ["errors"])
    drive.step({"errors": plan.GateCheck(True, "2 samples")})
    drive.step()  # staging starts
    fleet.settle_all()
    drive.step()
    drive.step({"errors": plan.GateCheck(False, "1 of 2 samples are not non-zero")})
    assert drive.status.phase == api.BAKING  # one failure of two allowed
    drive.step({"errors": plan.GateCheck(False, "1 of 2 samples are not non-zero")}, seconds=30)
    assert drive.status.phase == api.ROLLING_BACK
    assert drive.states() == {"dev-1": api.STACK_ROLLING_BACK, "dev-2": api.STACK_ROLLING_BACK,
                              "staging-1": api.STACK_ROLLING_BACK, "staging-2": api.STACK_ROLLING_BACK,
                              "prod-1": api.STACK_SKIPPED, "prod-2": api.STACK_SKIPPED}
    assert fleet.stacks["dev-1"]["spec"]["config"] == {"version": "v1", "keep": "yes"}
    assert fleet.stacks["staging-2"]["spec"]["config"] == {"keep": "yes"}
    assert fleet.stacks["prod-1"]["spec"]["config"]["version"] == "v1"  # never touched
    drive.step()
    assert drive.status.phase == api.ROLLING_BACK
    fleet.settle_all()
    drive.step()
    assert drive.status.phase == api.ROLLED_BACK
    assert drive.status.message is not None
    assert drive.status.message.startswith("rolled back (gate errors failed 2 checks in a row in wave staging")
    assert [w.phase for w in drive.status.waves or []] == [api.WAVE_ROLLED_BACK, api.WAVE_ROLLED_BACK,
                                                           api.WAVE_SKIPPED]
    stalled = next(c for c in drive.status.conditions or [] if c.type == "Stalled")
    assert stalled.reason == api.REASON_GATE_FAILED
    assert plan.EVENT_GATE_FAILED in drive.reasons()
    assert drive.reasons()[-1] == plan.EVENT_ROLLED_BACK
    assert all(names.ANNOTATION_ROLLOUT not in s["metadata"]["annotations"] for s in fleet.stacks.values())
    # ended: nothing more happens
    assert drive.step().patches == []


def test_failures_over_the_rate_pause_the_wave_until_they_recover_or_a_promote() -> None:
    fleet = _fleet()
    drive = Driver(_rollout(maxFailureRate=0), fleet)
    drive.step()
    fleet.settle("dev-1", fail=True)
    fleet.settle("dev-2")
    drive.step()
    assert drive.status.phase == api.PAUSED
    assert drive.status.message is not None
    assert drive.status.message.startswith("failure rate 1/2 in wave dev")
    assert plan.EVENT_PAUSED in drive.reasons()
    reconciling = next(c for c in drive.status.conditions or [] if c.type == "Reconciling")
    assert reconciling.reason == api.REASON_FAILURE_RATE
    drive.step()
    assert drive.reasons().count(plan.EVENT_PAUSED) == 1  # said once
    fleet.settle("dev-1")  # its own retry succeeded
    drive.step()
    drive.step()
    assert drive.states()["dev-1"] == api.STACK_SUCCEEDED
    assert drive.status.phase == api.PROGRESSING
    assert drive.states()["staging-1"] == api.STACK_UPDATING


def test_a_promote_lets_a_paused_wave_go_on_once() -> None:
    fleet = _fleet()
    drive = Driver(_rollout(), fleet)
    drive.step()
    fleet.settle("dev-1", fail=True)
    fleet.settle("dev-2")
    drive.step()
    assert drive.status.phase == api.PAUSED
    drive.rollout.metadata.annotations = {names.ANNOTATION_ROLLOUT_PROMOTE: "now"}
    drive.step()
    drive.step()
    assert drive.status.promoted == "now"
    assert drive.states()["staging-1"] == api.STACK_UPDATING
    assert plan.EVENT_PROMOTED in drive.reasons()


def test_spec_paused_starts_no_stack_and_resumes() -> None:
    fleet = _fleet()
    drive = Driver(_rollout(paused=True), fleet)
    drive.step()
    assert drive.status.phase == api.PAUSED
    assert fleet.stacks["dev-1"]["spec"]["config"]["version"] == "v1"
    drive.rollout.spec.paused = False  # type: ignore[union-attr]
    drive.step()
    assert fleet.stacks["dev-1"]["spec"]["config"]["version"] == "v2"
    assert plan.EVENT_RESUMED in drive.reasons()


def test_abort_rolls_back_what_was_changed() -> None:
    fleet = _fleet()
    drive = Driver(_rollout(), fleet)
    drive.step()
    drive.rollout.spec.abort = True  # type: ignore[union-attr]
    drive.step()
    assert drive.status.phase == api.ROLLING_BACK
    assert fleet.stacks["dev-1"]["spec"]["config"]["version"] == "v1"
    fleet.settle_all()
    drive.step()
    assert drive.status.phase == api.ROLLED_BACK
    assert drive.status.rollback_reason == api.REASON_ABORTED


def test_a_stack_in_another_active_rollout_blocks_the_start_until_it_ends() -> None:
    fleet = _fleet()
    fleet.stacks["prod-1"]["metadata"]["annotations"][names.ANNOTATION_ROLLOUT] = "v1-fix"
    drive = Driver(_rollout(), fleet)
    drive.step(active={"v1-fix"})
    assert drive.status.phase == api.BLOCKED
    assert drive.status.message is not None
    assert "prod-1 (v1-fix)" in drive.status.message
    assert fleet.stacks["dev-1"]["spec"]["config"]["version"] == "v1"
    stalled = next(c for c in drive.status.conditions or [] if c.type == "Reconciling")
    assert stalled.reason == api.REASON_CONFLICT
    drive.step(active={"v1-fix"})
    assert drive.reasons() == [plan.EVENT_BLOCKED]
    drive.step(active=set())  # the other one ended: its stale claim binds nothing
    assert drive.status.phase == api.PROGRESSING


def test_a_wave_waiting_for_approvals_says_which_stacks() -> None:
    fleet = _fleet()
    drive = Driver(_rollout(), fleet)
    drive.step()
    fleet.stacks["dev-2"]["status"]["approval"] = {"state": "AwaitingApproval", "generation": 2}
    fleet.settle("dev-1")
    drive.step()
    assert drive.status.message == "wave dev waits for StackApprovals of dev-2"
    reconciling = next(c for c in drive.status.conditions or [] if c.type == "Reconciling")
    assert reconciling.reason == api.REASON_WAITING_FOR_APPROVAL
    assert plan.EVENT_WAITING_FOR_APPROVAL in drive.reasons()


def test_a_plan_of_the_spec_before_the_revision_awaiting_approval_is_not_the_one_the_wave_waits_for() -> None:
    fleet = _fleet()
    # dev-2 needs approvals and awaits one for its old spec (generation 1) when the rollout starts
    fleet.stacks["dev-2"]["status"]["approval"] = {"state": "AwaitingApproval", "generation": 1}
    drive = Driver(_rollout(), fleet)
    drive.step()  # dev-1 and dev-2 changed in this pass: what dev-2 awaited is no longer the plan that matters
    assert drive.status.message == "wave dev: 0 of 2 Stacks at the revision, 2 updating, 0 pending"
    drive.step()  # dev-2 at the revision (generation 2), its status still of generation 1
    assert drive.status.message == "wave dev: 0 of 2 Stacks at the revision, 2 updating, 0 pending"
    entry = next(s for s in drive.status.stacks or [] if s.name == "dev-2")
    assert entry.message is None
    fleet.stacks["dev-2"]["status"]["approval"] = {"state": "AwaitingApproval", "generation": 2}  # previewed again
    drive.step()
    assert drive.status.message == "wave dev waits for StackApprovals of dev-2"
    entry = next(s for s in drive.status.stacks or [] if s.name == "dev-2")
    assert entry.message == "waiting for a StackApproval"


def test_a_patch_lost_to_a_crash_is_sent_again_and_the_undo_is_never_lost() -> None:
    fleet = _fleet()
    drive = Driver(_rollout(), fleet)
    first = plan.plan(drive.rollout, fleet.views(), active_rollouts=set(), checks={}, now=T0)
    drive.rollout = drive.rollout.model_copy(update={"status": first.status})  # status written, patches lost
    again = drive.step()
    assert {p.name for p in again.patches if "spec" in p.patch} == {"dev-1", "dev-2"}
    entry = next(s for s in drive.status.stacks or [] if s.name == "dev-1")
    assert entry.previous == {"config": {"version": "v1"}}


def test_revision_changes_only_what_it_names_and_undoes_it_exactly() -> None:
    spec = {"branch": "main", "config": {"a": "1"}, "programRef": None}
    change = revision.change(api.RolloutRevision.model_validate({"commit": "abcdef1", "config": {"b": "2"}}), spec)
    assert change.forward == {"commit": "abcdef1", "branch": None, "config": {"b": "2"}}
    assert change.undo == {"commit": None, "branch": "main", "config": {"b": None}}
    assert not revision.at(change.forward, spec)
    moved = {"commit": "abcdef1", "config": {"a": "1", "b": "2"}}
    assert revision.at(change.forward, moved)
    assert revision.at(change.undo, spec)
    assert revision.summary(api.RolloutRevision.model_validate({"commit": "abcdef1234567890", "config": {
        "password": "hunter2"}})) == "commit abcdef123456; config password"


def test_a_rollback_patches_each_stack_once_per_pass() -> None:
    fleet = _fleet()
    drive = Driver(_rollout(), fleet)
    drive.step()
    drive.rollout.spec.abort = True  # type: ignore[union-attr]
    result = drive.step()
    assert sorted(p.name for p in result.patches) == ["dev-1", "dev-2"]


def _config_of(fleet: Fleet, name: str) -> Any:
    return fleet.stacks[name]["spec"]["config"]


def test_nested_config_values_are_replaced_going_forward_and_restored_exactly_going_back() -> None:
    fleet = _fleet()
    for obj in fleet.stacks.values():
        obj["spec"]["config"]["db"] = {"size": "small", "region": "eu"}
    drive = Driver(_rollout(revision={"config": {"db": {"size": "large", "tier": "gold"}}}), fleet)
    drive.step()
    assert _config_of(fleet, "dev-1")["db"] == {"size": "large", "tier": "gold"}
    fleet.settle_all()
    drive.step()
    assert drive.states()["dev-1"] == api.STACK_SUCCEEDED  # the merged spec is exactly at the revision
    drive.rollout.spec.abort = True  # type: ignore[union-attr]
    drive.step()
    assert _config_of(fleet, "dev-1")["db"] == {"size": "small", "region": "eu"}
    fleet.settle_all()
    drive.step()
    assert drive.status.phase == api.ROLLED_BACK


def test_of_two_rollouts_started_at_once_each_stack_is_changed_by_one_only() -> None:
    fleet = _fleet()
    first = Driver(_rollout(), fleet)
    second = Driver(_rollout(revision={"config": {"version": "v3"}}).model_copy(
        update={"metadata": api.StackRollout.model_validate({"metadata": {"name": "v3", "namespace": "ns"}}).metadata}),
        fleet)
    views = fleet.views()  # both read the fleet before either wrote
    a = plan.plan(first.rollout, views, active_rollouts=set(), checks={}, now=T0)
    b = plan.plan(second.rollout, views, active_rollouts=set(), checks={}, now=T0)
    assert fleet.apply(a.patches) == []
    assert sorted(fleet.apply(b.patches)) == sorted(p.name for p in b.patches)  # every one stale: 409
    first.rollout = first.rollout.model_copy(update={"status": a.status})
    second.rollout = second.rollout.model_copy(update={"status": b.status})
    for _ in range(3):
        first.step(active={"v3"})
        second.step(active={"v2"})
    assert {n: s["spec"]["config"]["version"] for n, s in fleet.stacks.items() if n.startswith("dev")} == \
        {"dev-1": "v2", "dev-2": "v2"}
    assert set(second.states().values()) == {api.STACK_SKIPPED}
    assert all(s.message == "claimed by StackRollout v2" for s in second.status.stacks or [])


def test_a_promote_acts_on_the_state_it_was_sent_in() -> None:
    fleet = _fleet()
    drive = Driver(_rollout(waves=[{"selector": {"matchLabels": {"env": "dev"}}, "bake": "1h"},
                                   {"percent": 100}]), fleet)
    drive.step()
    drive.rollout.metadata.annotations = {names.ANNOTATION_ROLLOUT_PROMOTE: "early"}
    drive.step()  # progressing: nothing to promote
    assert not (drive.status.waves or [])[0].promoted
    fleet.settle("dev-1", fail=True)
    fleet.settle("dev-2")
    drive.step()
    assert drive.status.phase == api.PAUSED
    drive.rollout.metadata.annotations = {names.ANNOTATION_ROLLOUT_PROMOTE: "past-failures"}
    drive.step()
    drive.step()
    assert drive.status.phase == api.BAKING  # past the failure rate, but the hour of bake still holds
    drive.step(seconds=60)
    assert drive.status.phase == api.BAKING
    drive.rollout.metadata.annotations = {names.ANNOTATION_ROLLOUT_PROMOTE: "end-bake"}
    drive.step()
    drive.step()
    assert drive.states()["prod-1"] == api.STACK_UPDATING


def test_empty_waves_pass_at_once_and_no_stack_at_all_completes() -> None:
    fleet = _fleet()
    drive = Driver(_rollout(waves=[{"selector": {"matchLabels": {"env": "qa"}}, "bake": "1h"},
                                   {"selector": {"matchLabels": {"env": "dev"}}}]), fleet)
    drive.step()
    assert drive.status.current_wave == 1
    assert drive.states()["dev-1"] == api.STACK_UPDATING
    nothing = Driver(_rollout(selector={"matchLabels": {"app": "none"}}), _fleet())
    nothing.step()
    assert nothing.status.phase == api.COMPLETED
    ready = next(c for c in nothing.status.conditions or [] if c.type == "Ready")
    assert (ready.status, ready.reason) == ("True", api.REASON_NO_STACKS)


def test_a_change_the_api_server_refuses_fails_the_stack_instead_of_being_sent_for_ever() -> None:
    fleet = _fleet()
    drive = Driver(_rollout(maxFailureRate=50), fleet)
    drive.step()
    _config_of(fleet, "dev-1")["version"] = "v1"  # the API server refused dev-1's change
    drive.step(refused={"dev-1": "admission webhook denied the request"})
    assert drive.states()["dev-1"] == api.STACK_FAILED
    entry = next(s for s in drive.status.stacks or [] if s.name == "dev-1")
    assert entry.message == "the API server refused the change: admission webhook denied the request"
    again = drive.step()
    assert "dev-1" not in [p.name for p in again.patches if "spec" in p.patch]
    assert drive.states()["dev-1"] == api.STACK_FAILED


def test_a_suspended_stack_counts_as_rolled_back_once_its_spec_is_restored() -> None:
    fleet = _fleet()
    drive = Driver(_rollout(), fleet)
    drive.step()
    fleet.settle_all()
    fleet.stacks["dev-1"]["spec"]["suspend"] = True
    drive.rollout.spec.abort = True  # type: ignore[union-attr]
    drive.step()
    fleet.settle("dev-2")
    drive.step()
    assert drive.status.phase == api.ROLLED_BACK
    entry = next(s for s in drive.status.stacks or [] if s.name == "dev-1")
    assert entry.message is not None
    assert "suspended" in entry.message


def test_the_revision_is_the_one_the_rollout_started_with() -> None:
    fleet = _fleet()
    drive = Driver(_rollout(maxFailureRate=100), fleet)
    drive.step()
    drive.rollout.spec.revision = api.RolloutRevision.model_validate(  # type: ignore[union-attr]
        {"config": {"image": "v9"}})
    fleet.settle_all()
    drive.step()
    drive.step()
    assert "image" not in _config_of(fleet, "staging-1")
    assert _config_of(fleet, "staging-1")["version"] == "v2"


def test_a_rollback_waiting_for_an_approval_says_so_and_waits() -> None:
    fleet = _fleet()
    drive = Driver(_rollout(), fleet)
    drive.step()
    fleet.settle_all()
    drive.rollout.spec.abort = True  # type: ignore[union-attr]
    drive.step()
    fleet.settle("dev-1")
    fleet.stacks["dev-2"]["status"]["approval"] = {"state": "AwaitingApproval",
                                                   "generation": fleet.stacks["dev-2"]["metadata"]["generation"]}
    drive.step()
    assert drive.status.phase == api.ROLLING_BACK
    entry = next(s for s in drive.status.stacks or [] if s.name == "dev-2")
    assert entry.message == "waiting for a StackApproval of the rollback's plan"
    fleet.settle("dev-2")
    drive.step()
    assert drive.status.phase == api.ROLLED_BACK
