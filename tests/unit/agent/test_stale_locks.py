"""Stale stack locks (pko.agent.stalelocks): only a lock taken on this host by a process that is no longer a
running Pulumi CLI is released; a live holder's, another host's, or a malformed lock is left alone; only
``file://`` backends are read."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

from pko.agent import stalelocks

PROJECT = {"name": "slow"}


def _lock(root: Path, name: str, **content: object) -> Path:
    directory = root / ".pulumi" / "locks" / "organization" / "slow" / "dev"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps(content))
    return path


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_stale_needs_this_host_and_a_dead_holder() -> None:
    assert stalelocks.stale({"pid": 7, "hostname": "vm"}, "vm", lambda pid: False)
    assert not stalelocks.stale({"pid": 7, "hostname": "vm"}, "vm", lambda pid: True)
    assert not stalelocks.stale({"pid": 7, "hostname": "other"}, "vm", lambda pid: False)
    for pid in (None, "7", 0, -1, True):
        assert not stalelocks.stale({"pid": pid, "hostname": "vm"}, "vm", lambda p: False)


def test_a_lock_file_is_stale_only_if_taken_before_this_agent_or_by_its_own_cli(tmp_path: Path) -> None:
    """With the agent's start: a lock file of a gone pid taken after it (nanoseconds, as the CLI writes them) and
    by no command of its own is a twin host's, and stays."""
    started = datetime.datetime(2026, 12, 7, 12, 0, tzinfo=datetime.UTC)
    old = _lock(tmp_path, "old", pid=1001, hostname="vm", timestamp="2026-12-07T11:59:58.123456789Z")
    twin = _lock(tmp_path, "twin", pid=1002, hostname="vm", timestamp="2026-12-07T12:03:03.5+00:00")
    mine = _lock(tmp_path, "mine", pid=1003, hostname="vm", timestamp="2026-12-07T12:03:04Z")
    env = {"PULUMI_BACKEND_URL": f"file://{tmp_path}"}
    released = stalelocks.release(env, PROJECT, "dev", hostname="vm", alive=lambda pid: False, since=started,
                                  ours=lambda pid, taken: pid == 1003)
    assert sorted(path.name for path, _ in released) == ["mine.json", "old.json"]
    assert twin.exists()
    assert not old.exists()
    assert not mine.exists()


def test_release_removes_only_the_dead_holders_lock(tmp_path: Path) -> None:
    dead = _lock(tmp_path, "dead", pid=1001, hostname="vm")
    live = _lock(tmp_path, "live", pid=1002, hostname="vm")
    foreign = _lock(tmp_path, "foreign", pid=1001, hostname="elsewhere")
    broken = _lock(tmp_path, "broken")
    broken.write_text("{not json")
    attrs = dead.with_name(dead.name + ".attrs")
    attrs.write_text("{}")
    env = {"PULUMI_BACKEND_URL": f"file://{tmp_path}"}
    removed = stalelocks.release(env, PROJECT, "dev", hostname="vm", alive=lambda pid: pid == 1002)
    assert [path for path, _ in removed] == [dead]
    assert removed[0][1]["pid"] == 1001
    assert not dead.exists()
    assert not attrs.exists()
    assert live.exists()
    assert foreign.exists()
    assert broken.exists()


def test_the_project_backend_url_and_a_qualified_stack_name(tmp_path: Path) -> None:
    dead = _lock(tmp_path, "dead", pid=1001, hostname="vm")
    project = {**PROJECT, "backend": {"url": f"file://{tmp_path}"}}
    removed = stalelocks.release({}, project, "organization/slow/dev", hostname="vm", alive=lambda pid: False)
    assert [path for path, _ in removed] == [dead]


def test_other_backends_are_never_read(tmp_path: Path) -> None:
    lock = _lock(tmp_path, "dead", pid=1001, hostname="vm")
    for url in ("s3://bucket", "https://api.pulumi.com", ""):
        assert stalelocks.release({"PULUMI_BACKEND_URL": url}, PROJECT, "dev", hostname="vm",
                                  alive=lambda pid: False) == []
    assert lock.exists()


def test_running_pulumi_is_a_live_pulumi_process() -> None:
    assert not stalelocks.running_pulumi(_dead_pid())
    assert not stalelocks.running_pulumi(1 << 22)
    this = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not stalelocks.running_pulumi(this.pid)  # alive, but not a Pulumi CLI: a reused pid
    finally:
        this.kill()
        this.wait()
