"""The failure policy (pko): how many failures stall a Stack, the backoff's base, factor and cap, and the automatic
retry of a Stalled Stack — operator-wide defaults, each overridden by the Stack's `spec.retryPolicy`. Without
either, every rule is the reference's (3 failures, 10s·3ⁿ capped at 24h, a Stalled Stack waits for a change)."""

from __future__ import annotations

import datetime
from typing import Any

import grpc
import pytest

from pko.api import durations
from pko.api import stack as stack_api
from pko.api.meta import Condition
from pko.controllers.stack import sync
from pko.protocol import transient

NOW = datetime.datetime(2026, 11, 22, 12, 0, tzinfo=datetime.UTC)


def _stack(failures: int | None, seconds_ago: float = 0, state: str = "failed", **spec: Any) -> stack_api.Stack:
    last: dict[str, Any] = {"generation": 1, "state": state, "type": "up", "lastAttemptedCommit": "c",
                            "lastResyncTime": (NOW - datetime.timedelta(seconds=seconds_ago)).strftime(
                                "%Y-%m-%dT%H:%M:%SZ")}
    if failures is not None:
        last["failures"] = failures
    if state == "succeeded":
        last["lastSuccessfulCommit"] = "c"
    return stack_api.Stack.model_validate({"metadata": {"name": "s", "generation": 1},
                                           "spec": {"stack": "dev", **spec}, "status": {"lastUpdate": last}})


def _last(stack: stack_api.Stack) -> stack_api.StackUpdateState:
    assert stack.status is not None
    assert stack.status.last_update is not None
    return stack.status.last_update


def _conditions(found: list[Condition]) -> dict[str, tuple[str, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in found}


# --- the policy in effect ------------------------------------------------------------------------------------

def test_without_settings_the_policy_is_the_references() -> None:
    assert sync.policy_for(stack_api.spec_of(_stack(0))) == sync.RetryPolicy(
        max_failures=3, backoff_base=10.0, backoff_factor=3.0, max_backoff=24 * 3600.0, stalled_retry_interval=0.0)


def test_each_stack_field_overrides_its_operator_default() -> None:
    operator = sync.RetryPolicy(max_failures=5, backoff_base=20.0, backoff_factor=2.0, max_backoff=3600.0,
                                stalled_retry_interval=7200.0)
    assert sync.policy_for(stack_api.spec_of(_stack(0)), operator) == operator
    spec = stack_api.spec_of(_stack(0, retryPolicy={"maxFailures": 1}))
    assert sync.policy_for(spec, operator) == sync.RetryPolicy(1, 20.0, 2.0, 3600.0, 7200.0)
    spec = stack_api.spec_of(_stack(0, retryMaxBackoffDurationSeconds=60, retryPolicy={
        "maxFailures": 0, "backoffBaseSeconds": 1, "backoffFactor": 1, "stalledRetryIntervalSeconds": 0}))
    assert sync.policy_for(spec, operator) == sync.RetryPolicy(0, 1.0, 1.0, 60.0, 0.0)


def test_an_empty_retry_policy_changes_nothing() -> None:
    assert sync.policy_for(stack_api.spec_of(_stack(0, retryPolicy={}))) == sync.DEFAULT_POLICY


# --- backoff -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("policy", "failures", "seconds"), [
    ({"backoffBaseSeconds": 5}, 0, 5.0),
    ({"backoffBaseSeconds": 5}, 2, 45.0),  # 5·3²
    ({"backoffFactor": 2}, 3, 80.0),  # 10·2³
    ({"backoffFactor": 1, "backoffBaseSeconds": 30}, 7, 30.0),  # constant
    ({"backoffBaseSeconds": 100, "backoffFactor": 10}, 5, 24 * 3600.0),  # 10⁷s: the 24h cap
])
def test_backoff_follows_the_stacks_base_and_factor(policy: dict[str, int], failures: int, seconds: float) -> None:
    stack = _stack(failures, retryPolicy=policy)
    assert sync.cooldown(stack_api.spec_of(stack), _last(stack)) == seconds


def test_backoff_follows_the_operators_base_and_factor() -> None:
    stack = _stack(2)
    defaults = sync.RetryPolicy(backoff_base=1.0, backoff_factor=1.5)
    assert sync.cooldown(stack_api.spec_of(stack), _last(stack), defaults=defaults) == 2.25


def test_a_huge_failure_count_is_capped_not_an_overflow() -> None:
    """Stalled retries keep counting failures; 3.0**5000 overflows a float."""
    assert sync.RetryPolicy(max_backoff=3600.0).backoff(5000) == 3600.0


# --- how many failures stall -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("max_failures", "failures", "stalled"), [
    (0, 0, True), (1, 0, False), (1, 1, True), (5, 3, False), (5, 5, True),
])
def test_max_failures_decides_stalled(max_failures: int, failures: int, stalled: bool) -> None:
    stack = _stack(failures, seconds_ago=10**6, retryPolicy={"maxFailures": max_failures})
    # long after any backoff: a stack below the limit retries, a stalled one does not
    assert sync.is_synced(stack, "c", NOW) == ((True, "") if stalled else (False, _backoff_message(stack)))
    policy = sync.policy_for(stack_api.spec_of(stack))
    conditions = _conditions(sync.mark_result(None, _last(stack), NOW, policy=policy))
    assert ("Stalled" in conditions) is stalled
    assert (sync.requeue_after(stack, NOW) is None) is stalled


def _backoff_message(stack: stack_api.Stack) -> str:
    return f"Backoff time elapsed: {durations.format_seconds(sync.cooldown(stack_api.spec_of(stack), _last(stack)))}"


def test_the_operator_limit_applies_to_stacks_without_their_own() -> None:
    stack = _stack(1, seconds_ago=10**6)
    assert sync.is_synced(stack, "c", NOW, defaults=sync.RetryPolicy(max_failures=1)) == (True, "")
    assert sync.is_synced(stack, "c", NOW)[0] is False  # the reference's 3


@pytest.mark.parametrize(("message", "stalled"), [
    ("failed to run update: exit status 255\nstderr: error: EOF\n", False),
    ("failed to run update: error: blob (code=Unavailable): SlowDown: Please reduce your request rate.", False),
    ("failed to run update: error: [503] Service Unavailable", False),
    ("failed to run update: error: Program failed with an unhandled exception: RuntimeError: boom", True),
    # the workspace's pod went away mid-update: the call ended, not the update (pko.protocol.transient)
    (transient.lost_agent_message(grpc.StatusCode.UNAVAILABLE, "Socket closed"), False),
    (transient.lost_agent_message(grpc.StatusCode.INTERNAL, "Socket closed"), True),
])
def test_a_passing_backend_failure_never_stalls(message: str, stalled: bool) -> None:
    stack = _stack(5, seconds_ago=10**6)
    assert stack.status is not None
    last = _last(stack).model_copy(update={"message": message})
    stack = stack.model_copy(update={"status": stack.status.model_copy(update={"last_update": last})})
    conditions = _conditions(sync.mark_result(None, last, NOW))
    assert ("Stalled" in conditions) is stalled
    # not stalled: retried with the backoff of its failure count, as any failure below the limit
    assert (sync.requeue_after(stack, NOW) is None) is stalled


def test_a_failure_never_counted_stalls_only_with_max_failures_zero() -> None:
    stack = _stack(None, seconds_ago=10**6, retryPolicy={"maxFailures": 0})
    assert _conditions(sync.mark_result(None, _last(stack), NOW, policy=sync.RetryPolicy(max_failures=0)))[
        "Stalled"] == ("True", "UpdateFailed", "up failed once; not retrying until the spec or source changes")


# --- stalled retry -----------------------------------------------------------------------------------------------

def test_a_stalled_stack_is_retried_after_the_interval() -> None:
    spec = {"retryPolicy": {"maxFailures": 1, "stalledRetryIntervalSeconds": 3600}}
    assert sync.is_synced(_stack(1, seconds_ago=3599, **spec), "c", NOW) == (True, "")
    assert sync.is_synced(_stack(1, seconds_ago=3600, **spec), "c", NOW) == (
        False, "Stalled retry interval elapsed: 1h0m0s")
    # and again after each further failure (the counter keeps growing)
    assert sync.is_synced(_stack(7, seconds_ago=4000, **spec), "c", NOW)[0] is False


def test_a_stalled_stack_is_looked_at_again_when_its_retry_is_due() -> None:
    stack = _stack(3, seconds_ago=600, retryPolicy={"stalledRetryIntervalSeconds": 3600})
    assert sync.requeue_after(stack, NOW) == 3000.0
    assert sync.requeue_after(_stack(3, seconds_ago=600), NOW) is None  # off: the reference waits for a change
    assert sync.requeue_after(_stack(3, seconds_ago=600), NOW,
                              defaults=sync.RetryPolicy(stalled_retry_interval=900.0)) == 300.0


def test_a_stacks_zero_interval_turns_the_operators_retry_off() -> None:
    stack = _stack(3, seconds_ago=10**6, retryPolicy={"stalledRetryIntervalSeconds": 0})
    defaults = sync.RetryPolicy(stalled_retry_interval=60.0)
    assert sync.is_synced(stack, "c", NOW, defaults=defaults) == (True, "")
    assert sync.requeue_after(stack, NOW, defaults=defaults) is None


def test_the_stalled_message_names_the_scheduled_retry() -> None:
    stack = _stack(3, retryPolicy={"stalledRetryIntervalSeconds": 5400})
    found = sync.mark_result(None, _last(stack), NOW, policy=sync.policy_for(stack_api.spec_of(stack)))
    assert _conditions(found)["Stalled"] == (
        "True", "UpdateFailed",
        "up failed 3 times; retrying 1h30m0s after the last failure, or when the spec or source changes")
    assert _conditions(found)["Ready"] == ("False", "NotReadyStalled", "reconciliation is stalled")


def test_a_new_commit_still_retries_a_stalled_stack_at_once() -> None:
    stack = _stack(3, retryPolicy={"stalledRetryIntervalSeconds": 3600})
    assert sync.is_synced(stack, "c2", NOW) == (False, 'New commit detected: "c2"')


def test_a_succeeded_stack_is_not_touched_by_the_policy() -> None:
    stack = _stack(None, state="succeeded", retryPolicy={"maxFailures": 0, "stalledRetryIntervalSeconds": 1})
    assert sync.is_synced(stack, "c", NOW) == (True, "")
    assert sync.requeue_after(stack, NOW) is None
