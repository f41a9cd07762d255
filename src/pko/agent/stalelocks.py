"""Release a stack lock left behind by a Pulumi CLI that died without cleaning up — the `pulumi cancel` a person
would run, done only when it is provably safe.

Why: a CLI SIGKILLed in the middle of an `up` (its agent was SIGKILLed, its container OOM-killed, its pod evicted
without grace) leaves its lock file in a ``file://`` backend, and every later operation on the stack fails with
``Another update is currently in progress`` until someone runs ``pulumi cancel``. The lock file says who holds
it (``{"pid", "username", "hostname", "timestamp"}``); a lock taken on this host by a process that is no longer
a running Pulumi CLI can never be released by its owner, so the agent removes it before its next operation. A
lock held on another host, or by a live ``pulumi`` process, is never touched: that may be a real concurrent
update, and failing with the conflict is then the right answer.

``file://`` backends are read before each operation (:func:`release`). Other DIY backends (S3, GCS, Azure Blob)
are objects the agent cannot list itself, but the CLI names every lock it refused on, with its holder: "the stack
is currently locked by 1 lock(s) … <url>: created by user@host (pid N) at <time>" (:func:`refusing_locks`). When
every lock so named is provably stale, ``pulumi cancel`` (which deletes the stack's lock objects) is the safe
answer (:func:`all_stale`), and the agent runs the refused operation again. Pulumi Cloud expires an abandoned
update's lease itself. :func:`stale`, :func:`refusing_locks` and :func:`all_stale` are pure; :func:`release` does
the file I/O, and logs lock paths only, never their environment.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import re
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

log = logging.getLogger("pko.agent.locks")


Ours = Callable[[int, "datetime.datetime | None"], bool]


def _none(pid: int, taken: datetime.datetime | None) -> bool:
    return False


#: How far this agent's start may lie after its predecessor's lock and the lock still count as the predecessor's:
#: the clocks of two nodes differ (a pod rescheduled), and a lock left for this agent's life would fail every update.
CLOCK_SLACK = datetime.timedelta(seconds=10)


def stale(lock: Mapping[str, Any], hostname: str, running_pulumi: Callable[[int], bool],
          since: datetime.datetime | None = None, ours: Ours = _none) -> bool:
    """Whether the lock `lock` (a lock file's content) was taken on `hostname` by a process that is gone.

    A pod's hostname is its name, which is unique in its namespace only: the same Stack applied in two clusters
    (or a namespace of the same name) against one backend runs on a twin of this hostname, whose pids mean nothing
    here. So, with `since` (when this agent started), a gone holder's lock counts only when it was taken before
    then (with :data:`CLOCK_SLACK` for two nodes' clocks) — by the agent or container this one replaced, which is
    what it is for — or by a command this agent started itself before the lock's time (`ours`: a CLI killed under
    a living agent); a lock of a gone pid taken while this agent ran, by no command of its own, is someone else's
    and stays."""
    pid = lock.get("pid")
    if lock.get("hostname") != hostname or not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if running_pulumi(pid):
        return False
    if since is None:
        return True
    taken = _moment(lock.get("timestamp"))
    return taken is not None and (ours(pid, taken) or taken < since + CLOCK_SLACK)


def _moment(value: object) -> datetime.datetime | None:
    """A lock's time (the CLI's RFC 3339, with nanoseconds in a lock file), or None."""
    try:
        moment = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


LOCKED = "the stack is currently locked by"
_HOLDER = re.compile(r"^\s+(?P<url>\S+): created by (?P<username>.*)@(?P<hostname>[^@\s]+) \(pid (?P<pid>-?\d+)\) at "
                     r"(?P<timestamp>\S+)", re.MULTILINE)


def refusing_locks(output: str) -> list[dict[str, Any]]:
    """The locks a CLI refused an operation on, as it listed them (url, username, hostname, pid); [] for any other
    failure."""
    if LOCKED not in output:
        return []
    return [{**m.groupdict(), "pid": int(m["pid"])} for m in _HOLDER.finditer(output)]


def all_stale(locks: list[dict[str, Any]], hostname: str, running_pulumi: Callable[[int], bool],
              since: datetime.datetime | None = None, ours: Ours = _none) -> bool:
    """Whether there are locks and each is :func:`stale` (then `pulumi cancel`, which deletes every lock of the
    stack, removes only dead ones)."""
    return bool(locks) and all(stale(lock, hostname, running_pulumi, since, ours) for lock in locks)


def backend_root(env: Mapping[str, str], project: Mapping[str, Any]) -> Path | None:
    """The directory of a ``file://`` backend (``$PULUMI_BACKEND_URL``, else the project's ``backend.url``)."""
    url = env.get("PULUMI_BACKEND_URL") or str((project.get("backend") or {}).get("url") or "")
    if not url.startswith("file://"):
        return None
    path = unquote(urlparse(url).path) if url.startswith("file:///") else url[len("file://"):]
    return Path(os.path.expanduser(path or "~"))


def lock_dirs(root: Path, project: str, stack: str) -> list[Path]:
    """Where the CLI keeps `stack`'s locks: per project (the default layout), or the legacy layout."""
    name = stack.rsplit("/", 1)[-1]
    return [root / ".pulumi" / "locks" / "organization" / project / name, root / ".pulumi" / "locks" / name]


def running_pulumi(pid: int) -> bool:
    """Whether `pid` is a live (not zombie) Pulumi CLI process on this host."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]:
        return False
    return Path(argv0).name == "pulumi"


def release(env: Mapping[str, str], project: Mapping[str, Any], stack: str,
            hostname: str | None = None, alive: Callable[[int], bool] = running_pulumi,
            since: datetime.datetime | None = None, ours: Ours = _none,
            ) -> list[tuple[Path, dict[str, Any]]]:
    """Remove `stack`'s :func:`stale` lock files; each path removed, with the lock it held."""
    root = backend_root(env, project)
    if root is None:
        return []
    host = hostname if hostname is not None else socket.gethostname()
    removed = []
    for directory in lock_dirs(root, str(project.get("name") or ""), stack):
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.json")):
            try:
                lock = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(lock, dict) and stale(lock, host, alive, since, ours):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    removed.append((path, lock))
                    log.warning("released the stack lock %s: its holder (pid %s on this host) is gone", path.name,
                                lock.get("pid"))
                with contextlib.suppress(FileNotFoundError):  # the file blob store's metadata beside it
                    path.with_name(path.name + ".attrs").unlink()
    return removed
