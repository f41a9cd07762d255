"""TTL (pko, `spec.ttl`): a Stack expires its TTL after its creation; once marked expired its deletion destroys,
whatever `destroyOnFinalize` says, and destroy protection covers that destroy; the destroy Update it makes must leave
the stack empty, and an Update that did not is failed with `ResourcesRemain`."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from pko.api import names
from pko.api import stack as stack_api
from pko.api import update as up_api
from pko.api import workspace as ws_api
from pko.controllers.stack import approval, sync, ttl, updates
from pko.controllers.update import plan

CREATED = datetime.datetime(2026, 11, 28, 10, 0, tzinfo=datetime.UTC)


def _stack(ttl_value: str | None = None, *, expired: bool = False, deleting: bool = False,
           **spec: Any) -> stack_api.Stack:
    meta: dict[str, Any] = {"name": "review", "namespace": "ns", "uid": "u1", "generation": 1,
                            "creationTimestamp": "2026-11-28T10:00:00Z"}
    if expired:
        meta["annotations"] = {names.ANNOTATION_EXPIRED: "2026-11-28T10:30:00Z"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-28T10:30:01Z"
    body: dict[str, Any] = {"stack": "review"} | spec
    if ttl_value is not None:
        body["ttl"] = ttl_value
    return stack_api.Stack.model_validate({"metadata": meta, "spec": body})


def test_the_ttl_counts_from_creation() -> None:
    stack = _stack("30m")
    assert ttl.expires_at(stack) == CREATED + datetime.timedelta(minutes=30)
    early = ttl.plan(stack, CREATED + datetime.timedelta(minutes=10))
    assert (early.expired, early.wait) == (False, 1200.0)
    late = ttl.plan(stack, CREATED + datetime.timedelta(minutes=30))
    assert late.expired
    assert late.wait is None
    assert ttl.plan(_stack("1h30m"), CREATED + datetime.timedelta(hours=1)).wait == 1800.0


@pytest.mark.parametrize("value", [None, "", "0s", "soon"])
def test_no_ttl_or_an_unusable_one_never_expires(value: str | None) -> None:
    found = ttl.plan(_stack(value), CREATED + datetime.timedelta(days=365))
    assert found == ttl.Expiry()


def test_only_an_expired_stack_is_destroyed_without_destroy_on_finalize() -> None:
    assert not ttl.destroys_on_finalize(_stack("30m", deleting=True))  # deleted early: destroyOnFinalize decides
    assert ttl.destroys_on_finalize(_stack("30m", expired=True, deleting=True))
    assert ttl.destroys_on_finalize(_stack(None, deleting=True, destroyOnFinalize=True))


def test_destroy_protection_covers_the_ttls_destroy() -> None:
    protection = {"destroyProtection": {"enabled": True}}
    assert approval.destroy_protected(_stack("30m", expired=True, deleting=True, **protection))
    assert not approval.destroy_protected(_stack("30m", deleting=True, **protection))


def _workspace() -> ws_api.Workspace:
    return ws_api.Workspace.model_validate({"metadata": {"name": "review", "namespace": "ns", "uid": "w1"}})


def test_the_ttls_destroy_update_must_leave_the_stack_empty() -> None:
    made = updates.build(_stack("30m", expired=True, deleting=True), _workspace(), "Stack marked for deletion", 1)
    assert made["spec"]["type"] == "destroy"
    assert made["metadata"]["annotations"] == {names.ANNOTATION_EXPECT_EMPTY: "true"}
    assert plan.expects_empty(up_api.Update.model_validate(made))
    plain = updates.build(_stack(None, deleting=True, destroyOnFinalize=True), _workspace(), "m", 1)
    assert "annotations" not in plain["metadata"]
    assert not plan.expects_empty(up_api.Update.model_validate(plain))
    removing = up_api.Update.model_validate(made | {"spec": made["spec"] | {"remove": True}})
    assert not plan.expects_empty(removing)


def test_a_destroy_that_left_resources_fails_with_resources_remain() -> None:
    succeeded = plan.from_result("succeeded", "", "2026-11-28T10:31:00Z", "2026-11-28T10:31:05Z", None, None, None)
    assert plan.left_behind(succeeded, 0) is succeeded
    assert plan.left_behind(succeeded, None) is succeeded  # the backend does not say: the engine's success stands
    failed = plan.left_behind(succeeded, 2)
    assert failed.failed[:2] == ("True", plan.REASON_RESOURCES_REMAIN)
    assert "2 resources remain" in failed.failed[2]
    assert failed.message == failed.failed[2]
    assert (failed.start_time, failed.end_time) == (succeeded.start_time, succeeded.end_time)
    one = plan.left_behind(succeeded, 1)
    assert "1 resource remain " in one.failed[2]
    already = plan.from_error("boom", None)
    assert plan.left_behind(already, 3) is already


def test_sooner_keeps_the_earlier_look() -> None:
    assert ttl.sooner(None, None) is None
    assert ttl.sooner(5.0, None) == 5.0
    assert ttl.sooner(None, 7.0) == 7.0
    assert ttl.sooner(5.0, 3.0) == 3.0


def test_the_ttls_destroy_never_stalls() -> None:
    last = stack_api.StackUpdateState(generation=1, state="failed", type="destroy", failures=3, message="boom",
                                      last_resync_time="2026-11-28T10:31:00Z")
    expired = _stack("30m", expired=True, deleting=True).model_copy(
        update={"status": stack_api.StackStatus(last_update=last)})
    policy = sync.stack_policy(expired)
    assert not sync.stalled(last, policy)
    assert policy.backoff(3) == sync.DEFAULT_POLICY.backoff(3)  # the same backoff, only no stall
    plain = _stack(None, deleting=True, destroyOnFinalize=True)
    assert sync.stalled(last, sync.stack_policy(plain))
    # not deleting yet (marked, the delete not through): the Stack's own policy
    assert sync.stalled(last, sync.stack_policy(_stack("30m", expired=True)))
    synced, message = sync.is_synced(expired, "", datetime.datetime(2026, 11, 29, tzinfo=datetime.UTC))
    assert not synced
    assert message.startswith("Backoff time elapsed")


def test_only_a_mark_made_for_this_object_counts() -> None:
    restored = _stack("30m", expired=True, deleting=True)
    restored.metadata.creation_timestamp = "2026-11-29T08:00:00Z"  # created again after the mark was made
    assert not ttl.marked(restored)
    assert not ttl.destroys_on_finalize(restored)
    assert ttl.marked(_stack("30m", expired=True))


def test_an_update_template_cannot_take_the_mark_off_the_destroy() -> None:
    template = {"metadata": {"annotations": {names.ANNOTATION_EXPECT_EMPTY: "false", "team": "a"}}}
    made = updates.build(_stack("30m", expired=True, deleting=True, updateTemplate=template), _workspace(), "m", 1)
    assert made["metadata"]["annotations"] == {names.ANNOTATION_EXPECT_EMPTY: "true", "team": "a"}
