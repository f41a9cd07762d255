"""Which objects an operator of a shard reconciles (pko.runtime.sharding), and how a Stack relabelled into another
shard moves its Workspace and Updates there (pko.controllers.stack.shardmove)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

import pytest

from pko.api import names
from pko.api.update import LABEL_DRIFT_CHECK
from pko.controllers.stack import shardmove
from pko.kube import selectors
from pko.runtime import sharding

SHARD = names.LABEL_SHARD_KEY


def _obj(name: str, shard: str | None = None, complete: bool | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": name, "labels": {SHARD: shard} if shard else {}}}
    if complete is not None:
        obj["status"] = {"conditions": [{"type": "Complete", "status": "True" if complete else "False"}]}
    return obj


def test_a_named_shard_owns_its_labelled_objects_only() -> None:
    b = sharding.shard(shard_key="b")
    assert b.owns(_obj("x", "b"))
    assert not b.owns(_obj("x", "c"))
    assert not b.owns(_obj("x"))
    assert b.text == f"{SHARD} in (b)"
    assert b.lease_name("operator.pulumi.com") == "operator.pulumi.com-b"


def test_the_default_shard_owns_what_no_shard_names() -> None:
    default = sharding.shard(watch_label_selector=sharding.DEFAULT_SHARD_SELECTOR)
    assert default.owns(_obj("x"))
    assert not default.owns(_obj("x", "b"))
    assert default.lease_name("operator.pulumi.com") == "operator.pulumi.com"


def test_no_sharding_owns_everything() -> None:
    assert sharding.shard() is sharding.EVERYTHING
    assert sharding.EVERYTHING.owns(_obj("x", "b"))
    assert sharding.EVERYTHING.text is None
    assert not sharding.EVERYTHING.owns(None)


@pytest.mark.parametrize("name", ["B", "shard_1", "-a", "a" * 64, "a.b"])
def test_a_shard_name_that_cannot_name_a_lease_is_refused(name: str) -> None:
    with pytest.raises(sharding.ShardError, match="invalid shard name"):
        sharding.shard(shard_key=name)


def test_both_flags_at_once_are_refused() -> None:
    with pytest.raises(sharding.ShardError, match="give one"):
        sharding.shard(shard_key="b", watch_label_selector="team=x")


def test_a_bad_watch_selector_is_refused() -> None:
    with pytest.raises(sharding.ShardError, match="invalid --watch-label-selector"):
        sharding.shard(watch_label_selector="team in (x")


def test_a_stack_carries_only_its_shard_label() -> None:
    assert sharding.EVERYTHING.carried({SHARD: "b", "team": "x"}) == {SHARD: "b"}
    assert sharding.EVERYTHING.carried({"team": "x"}) == {}
    assert sharding.EVERYTHING.carried(None) == {}


def test_a_custom_selector_carries_the_labels_it_looks_at() -> None:
    """`--watch-label-selector team=a`: a Stack's Workspace and Updates must carry `team`, or the operator's own
    watches would never select them."""
    team = sharding.shard(watch_label_selector="team=a,tier!=db")
    labels = {"team": "a", "app": "web", SHARD: "x"}
    assert team.carried(labels) == {"team": "a", SHARD: "x"}
    assert team.owns_labels(team.carried(labels) | {"tier": "web"})
    assert team.carried_patch({"team": "a"}) == {SHARD: None, "team": "a", "tier": None}
    assert sharding.EVERYTHING.carried(labels) == {SHARD: "x"}
    assert sharding.shard(shard_key="b").carried({SHARD: "b", "team": "a"}) == {SHARD: "b"}


def test_an_operator_watches_its_own_shard_s_workspace_statefulsets_only() -> None:
    own = f"{names.LABEL_AUTO_COMPONENT}={names.COMPONENT_WORKSPACE}"
    assert sharding.statefulset_selector(sharding.EVERYTHING) == own
    assert sharding.statefulset_selector(sharding.shard(shard_key="b")) == f"{own},{SHARD} in (b)"
    default = sharding.statefulset_selector(sharding.shard(watch_label_selector=sharding.DEFAULT_SHARD_SELECTOR))
    assert default == f"{own},!{SHARD}"
    from pko.kube import selectors
    parsed = selectors.parse(sharding.statefulset_selector(sharding.shard(watch_label_selector="team=a")))
    assert parsed.matches({names.LABEL_AUTO_COMPONENT: names.COMPONENT_WORKSPACE, "team": "a"})
    assert not parsed.matches({names.LABEL_AUTO_COMPONENT: names.COMPONENT_WORKSPACE})  # another operator's
    assert not parsed.matches({"app": "db", "team": "a"})  # a user's StatefulSet


def test_operators_with_different_custom_selectors_elect_on_different_leases() -> None:
    """With the chart's `--leader-elect`, two operators selecting team=a and team=b must not take turns on one Lease
    (only one team's Stacks would run at a time); replicas of one operator share theirs."""
    base = "operator.pulumi.com"
    a = sharding.shard(watch_label_selector="team=a").lease_name(base)
    b = sharding.shard(watch_label_selector="team=b").lease_name(base)
    assert a != b
    assert a.startswith(f"{base}-")
    assert len(a) == len(base) + 11
    assert sharding.shard(watch_label_selector="tier in (x,y), team=a").lease_name(base) == \
        sharding.shard(watch_label_selector="team=a,tier in (y,x)").lease_name(base)
    # the chart's default shard and an operator that watches everything keep the reference's Lease
    assert sharding.shard(watch_label_selector=f"!{SHARD}").lease_name(base) == base
    assert sharding.EVERYTHING.lease_name(base) == base


def test_a_move_between_custom_selectors_relabels_with_the_selected_labels() -> None:
    b = sharding.shard(watch_label_selector="team=b")
    workspace = {"metadata": {"name": "s", "labels": {"team": "a"}}}
    move = shardmove.plan(b, {"team": "b", "app": "web"}, workspace, [])
    assert move.workspace
    assert move.labels == {SHARD: None, "team": "b"}


def test_a_move_between_selectors_on_different_keys_removes_the_old_key() -> None:
    """`team=a` to `region=eu`: the moved Workspace and Updates must lose `team`, or the `team=a` operator would still
    watch them; pko's own labels stay."""
    eu = sharding.shard(watch_label_selector="region=eu")
    own = names.stack_component_labels("s")
    workspace = {"metadata": {"name": "s", "labels": own | {"team": "a"}}}
    update = {"metadata": {"name": "s-1", "labels": own | {"team": "a", SHARD: "x", LABEL_DRIFT_CHECK: "true"}},
              "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    move = shardmove.plan(eu, {"region": "eu", "app": "web"}, workspace, [update])
    assert move.workspace
    assert move.updates == ("s-1",)
    assert move.labels == {SHARD: None, "region": "eu", "team": None}
    assert not selectors.parse("team=a").matches(_patched(update, move.labels))
    assert _patched(update, move.labels) == own | {"region": "eu", LABEL_DRIFT_CHECK: "true"}
    assert eu.owns_labels(_patched(workspace, move.labels))
    assert _patched(workspace, move.labels) == own | {"region": "eu"}
    # a label the Stack's templates give them is the user's: it stays
    templated = shardmove.templated_keys({"metadata": {"labels": {"team": "a"}}}, None)
    assert shardmove.plan(eu, {"region": "eu"}, workspace, [update], templated=templated).labels == {
        SHARD: None, "region": "eu"}


def _patched(obj: dict[str, Any], labels: Mapping[str, str | None]) -> dict[str, str]:
    merged = dict(obj["metadata"]["labels"]) | {k: v for k, v in labels.items() if v is not None}
    return {k: v for k, v in merged.items() if labels.get(k, v) is not None}


def test_a_move_waits_while_an_update_runs_in_the_other_shard() -> None:
    b = sharding.shard(shard_key="b")
    move = shardmove.plan(b, {SHARD: "b"}, _obj("s"), [_obj("s-1", complete=True), _obj("s-2", complete=False)])
    assert move.waiting
    assert move.running == ("s-2",)
    assert not move.workspace
    assert "s-2" in shardmove.waiting_message(move, _obj("s"))
    assert "the default shard" in shardmove.waiting_message(move, _obj("s"))


def test_an_update_not_yet_started_counts_as_running() -> None:
    move = shardmove.plan(sharding.shard(shard_key="b"), {SHARD: "b"}, _obj("s"), [_obj("s-1")])
    assert move.running == ("s-1",)


def test_a_quiet_stack_moves_its_workspace_and_every_foreign_update() -> None:
    b = sharding.shard(shard_key="b")
    move = shardmove.plan(b, {SHARD: "b"}, _obj("s"),
                          [_obj("s-2", complete=True), _obj("s-1", complete=True), _obj("s-0", "b", complete=False)])
    assert not move.waiting
    assert move.workspace
    assert move.updates == ("s-1", "s-2")
    assert move.labels == {SHARD: "b"}
    assert shardmove.moved_message(move, _obj("s")) == (
        "moved the Workspace and 2 Updates from the default shard to shard b")


def test_a_move_to_the_default_shard_removes_the_label() -> None:
    default = sharding.shard(watch_label_selector=sharding.DEFAULT_SHARD_SELECTOR)
    move = shardmove.plan(default, {}, _obj("s", "b"), [])
    assert move.workspace
    assert move.labels == {SHARD: None}  # the merge patch removes the label
    assert shardmove.moved_message(move, _obj("s", "b")) == "moved the Workspace from shard b to the default shard"


def test_nothing_moves_when_the_workspace_is_here_already() -> None:
    b = sharding.shard(shard_key="b")
    move = shardmove.plan(b, {SHARD: "b"}, _obj("s", "b"), [_obj("s-1", "b", complete=True)])
    assert (move.waiting, move.workspace, move.updates) == (False, False, ())


NOW = datetime.datetime(2026, 11, 27, 12, 0, 0, tzinfo=datetime.UTC)


def _lease(holder: str, renewed_ago: float, duration: int = 60) -> dict[str, Any]:
    renewed = NOW - datetime.timedelta(seconds=renewed_ago)
    return {"metadata": {"name": "operator.pulumi.com-b"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                     "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}


def test_the_shard_a_workspace_comes_from_is_known_by_its_lease() -> None:
    assert shardmove.origin_lease(_obj("s", "b")) == "operator.pulumi.com-b"
    assert shardmove.origin_lease(_obj("s")) == "operator.pulumi.com"


def test_a_workspace_of_a_custom_selector_names_the_lease_to_ask() -> None:
    """A `team=a` Workspace carries no shard label: without the annotation, the Lease derived from its labels would be
    the default shard's, whose operator stopping says nothing of the team=a operator's Update."""
    team = sharding.shard(watch_label_selector="team=a")
    workspace = {"metadata": {"name": "s", "labels": {"team": "a"},
                              "annotations": {names.ANNOTATION_SHARD_LEASE: shardmove.own_lease(team)}}}
    assert shardmove.origin_lease(workspace) == team.lease_name("operator.pulumi.com") != "operator.pulumi.com"
    # the messages say which operators, not "from the default shard to the default shard"
    move = shardmove.plan(sharding.shard(watch_label_selector="team=b"), {"team": "b"}, workspace, [])
    assert shardmove.moved_message(move, workspace) == (
        f"moved the Workspace from the operator of Lease {shardmove.own_lease(team)} to the operator watching team=b")
    assert shardmove.origin_lease({"metadata": {"name": "s", "labels": {"team": "a"}}}) == "operator.pulumi.com"
    assert shardmove.origin_lease(_obj("s", "b")) == "operator.pulumi.com-b"  # an older pko's: from its label
    edited = {"metadata": {"name": "s", "annotations": {names.ANNOTATION_SHARD_LEASE: "kube-scheduler"}}}
    assert shardmove.origin_lease(edited) == "operator.pulumi.com"  # only a Lease of pko's leader election
    assert shardmove.own_lease(sharding.EVERYTHING) is None


def test_a_shard_is_gone_when_its_lease_is_released_or_left_unrenewed_for_twice_its_duration() -> None:
    assert shardmove.origin_gone(None, NOW) is None  # no leader election: nothing tells, so the Stack waits
    assert shardmove.origin_gone(_lease("pod-b", 5), NOW) is None
    assert shardmove.origin_gone(_lease("pod-b", 100), NOW) is None  # late, but maybe a slow leader or skewed clock
    gone = shardmove.origin_gone(_lease("pod-b", 130), NOW)
    assert gone is not None
    assert "held by pod-b, was last renewed 130s ago" in gone
    released = shardmove.origin_gone(_lease("", 1), NOW)
    assert released == "its Lease operator.pulumi.com-b has no holder: its operator stopped"


def test_a_gone_shard_s_running_update_is_taken_over_with_the_rest() -> None:
    default = sharding.shard(watch_label_selector=sharding.DEFAULT_SHARD_SELECTOR)
    updates = [_obj("s-1", "b", complete=True), _obj("s-2", "b", complete=False)]
    assert shardmove.plan(default, {}, _obj("s", "b"), updates).waiting
    move = shardmove.plan(default, {}, _obj("s", "b"), updates, gone="its Lease x has no holder: its operator stopped")
    assert not move.waiting
    assert (move.updates, move.workspace, move.interrupted) == (("s-1", "s-2"), True, ("s-2",))
    assert shardmove.moved_message(move, _obj("s", "b")) == (
        "moved the Workspace and 2 Updates from shard b to the default shard; shard b is gone (its Lease x has no "
        "holder: its operator stopped), so Update s-2, which ran there, is taken over as an operation its "
        "operator's end interrupted")
    quiet = shardmove.plan(default, {}, _obj("s", "b"), updates[:1], gone="whatever")
    assert (quiet.interrupted, quiet.gone) == ((), None)
    assert "is gone" not in shardmove.moved_message(quiet, _obj("s", "b"))
