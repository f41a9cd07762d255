"""The locks a Pulumi CLI names when it refuses an operation on a DIY backend's locked stack, and when releasing them
all with `pulumi cancel` is safe."""

from __future__ import annotations

import datetime

from pko.agent import stalelocks

REFUSAL = """error: the stack is currently locked by 2 lock(s). Either wait for the other process(es) to end or delete \
the lock file with `pulumi cancel`.
  s3://state/.pulumi/locks/organization/p/dev/1b2c.json: created by pulumi@ws-0 (pid 41) at 2026-11-26T23:50:00Z
  s3://state/.pulumi/locks/organization/p/dev/9f8e.json: created by build@corp@ws-0 (pid 7) at 2026-11-26T23:51:00Z
"""


def test_each_named_lock_is_read_with_its_holder() -> None:
    assert stalelocks.refusing_locks(REFUSAL) == [
        {"url": "s3://state/.pulumi/locks/organization/p/dev/1b2c.json", "username": "pulumi", "hostname": "ws-0",
         "pid": 41, "timestamp": "2026-11-26T23:50:00Z"},
        {"url": "s3://state/.pulumi/locks/organization/p/dev/9f8e.json", "username": "build@corp", "hostname": "ws-0",
         "pid": 7, "timestamp": "2026-11-26T23:51:00Z"},
    ]


def test_any_other_failure_names_no_lock() -> None:
    assert stalelocks.refusing_locks("error: update failed\n  x: created by a@b (pid 1) at now") == []


def test_cancel_only_when_every_holder_is_a_dead_process_of_this_host() -> None:
    locks = stalelocks.refusing_locks(REFUSAL)
    assert stalelocks.all_stale(locks, "ws-0", lambda pid: False)
    assert not stalelocks.all_stale(locks, "ws-0", lambda pid: pid == 7)  # one holder still runs
    assert not stalelocks.all_stale(locks, "ws-1", lambda pid: False)  # taken on another host
    assert not stalelocks.all_stale([], "ws-0", lambda pid: False)


def test_a_twin_s_lock_taken_while_this_agent_ran_is_never_cancelled() -> None:
    """A pod's hostname is unique in its namespace only: the same Stack in another cluster against the same bucket
    runs on a twin hostname, whose pids mean nothing here. A lock taken after this agent started (beyond the slack
    for two nodes' clocks), by no command of its own, is the twin's — even with its pid not running here; one taken
    before, by the agent this one replaced, is stale; and one a command of this agent took, whenever."""
    locks = stalelocks.refusing_locks(REFUSAL)  # taken at 23:50 and 23:51
    slack = stalelocks.CLOCK_SLACK
    after, before = (datetime.datetime(2026, 11, 26, 23, 55, tzinfo=datetime.UTC),
                     datetime.datetime(2026, 11, 26, 23, 50, 30, tzinfo=datetime.UTC))
    assert stalelocks.all_stale(locks, "ws-0", lambda pid: False, after)
    assert not stalelocks.all_stale(locks, "ws-0", lambda pid: False, before)  # 9f8e was taken after it started
    assert stalelocks.all_stale(locks, "ws-0", lambda pid: False, before, lambda pid, taken: pid == 7)
    # a node whose clock is behind: the predecessor's lock still reads as taken before, within the slack
    assert stalelocks.all_stale(locks, "ws-0", lambda pid: False,
                                datetime.datetime(2026, 11, 26, 23, 51, tzinfo=datetime.UTC) - slack / 2)
    undated = [{**locks[0], "timestamp": "when?"}]
    assert not stalelocks.all_stale(undated, "ws-0", lambda pid: False, after)
