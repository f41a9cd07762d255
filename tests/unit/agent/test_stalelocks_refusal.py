"""The locks a Pulumi CLI names when it refuses an operation on a DIY backend's locked stack, and when releasing them
all with `pulumi cancel` is safe."""

from __future__ import annotations

from pko.agent import stalelocks

REFUSAL = """error: the stack is currently locked by 2 lock(s). Either wait for the other process(es) to end or delete \
the lock file with `pulumi cancel`.
  s3://state/.pulumi/locks/organization/p/dev/1b2c.json: created by pulumi@ws-0 (pid 41) at 2026-11-26T23:50:00Z
  s3://state/.pulumi/locks/organization/p/dev/9f8e.json: created by build@corp@ws-0 (pid 7) at 2026-11-26T23:51:00Z
"""


def test_each_named_lock_is_read_with_its_holder() -> None:
    assert stalelocks.refusing_locks(REFUSAL) == [
        {"url": "s3://state/.pulumi/locks/organization/p/dev/1b2c.json", "username": "pulumi", "hostname": "ws-0",
         "pid": 41},
        {"url": "s3://state/.pulumi/locks/organization/p/dev/9f8e.json", "username": "build@corp", "hostname": "ws-0",
         "pid": 7},
    ]


def test_any_other_failure_names_no_lock() -> None:
    assert stalelocks.refusing_locks("error: update failed\n  x: created by a@b (pid 1) at now") == []


def test_cancel_only_when_every_holder_is_a_dead_process_of_this_host() -> None:
    locks = stalelocks.refusing_locks(REFUSAL)
    assert stalelocks.all_stale(locks, "ws-0", lambda pid: False)
    assert not stalelocks.all_stale(locks, "ws-0", lambda pid: pid == 7)  # one holder still runs
    assert not stalelocks.all_stale(locks, "ws-1", lambda pid: False)  # taken on another host
    assert not stalelocks.all_stale([], "ws-0", lambda pid: False)
