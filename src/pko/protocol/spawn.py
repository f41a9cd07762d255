"""pko: how the `local` runtime asks its agent fork server for an agent (``python -m pko.cli.forkserver``).

Why: each `local` workspace's agent was a new Python process, and a new Python process spends about 0.25 CPU s
importing what the agent needs (grpc, protobuf, asyncio, dulwich, yaml, pko.agent) before it does anything: at
1,000 Stacks a pool turns over 1,000 times, and that was a seventh of the fleet's CPU. The fork server imports it
all once and forks a warm copy per agent; a fork costs milliseconds.

The wire: the operator and the fork server share a Unix stream socketpair. A request is a 4-byte big-endian length
sent with :data:`FDS` file descriptors (the child's stdin, stdout and stderr, as SCM_RIGHTS) or one more (the write
end of the agent's ready pipe, :mod:`pko.protocol.ready`, descriptor 3 in the child), then that many bytes of JSON:
:class:`Spawn`. The server answers each request, in order, with one JSON line: ``{"id": n, "pid": p}``
once the child is set up, or ``{"id": n, "error": message}`` when it could not be (a working directory that is not
there: the message an exec would have given). When a child exits it says ``{"exit": pid, "code": c}`` (the code as
:func:`os.waitstatus_to_exitcode` gives it: negative for a signal). The environment crosses the socket, never a
file or a command line: it holds the workspace's secrets.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

HEADER = struct.Struct("!I")
FDS = 3  # the child's stdin, stdout, stderr
MAX_FDS = FDS + 1  # and the ready pipe's write end (pko.protocol.ready.FORKED_FD)
MAX_REQUEST = 64 * 1024 * 1024  # more than any environment a kernel would exec with (ARG_MAX is 2 MiB by default)
#: the command-line room the fork server keeps so that each agent it forks can show its own argv in
#: /proc/<pid>/cmdline (what `ps`, the bench and the chaos tests read): the argv of an agent a few times over
TITLE_ROOM = 8192


@dataclass(frozen=True)
class Spawn:
    """One agent to fork: `argv` as `pko agent` takes it (``serve ...``), its environment and working directory."""

    id: int
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = "."

    def to_bytes(self) -> bytes:
        return json.dumps({"id": self.id, "argv": self.argv, "env": self.env, "cwd": self.cwd}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Spawn:
        """The request in `data`; ValueError when it is not one (never quoting it: its env holds secrets)."""
        try:
            raw = json.loads(data)
        except ValueError:
            raise ValueError("the spawn request is not JSON") from None
        if not (isinstance(raw, dict) and isinstance(raw.get("id"), int) and _strings(raw.get("argv"))
                and isinstance(raw.get("env"), dict) and _strings(list(raw["env"]) + list(raw["env"].values()))
                and isinstance(raw.get("cwd"), str)):
            raise ValueError("the spawn request is not {id, argv, env, cwd} of strings")
        return cls(raw["id"], list(raw["argv"]), dict(raw["env"]), raw["cwd"])


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def started(request: int, pid: int) -> bytes:
    return _line({"id": request, "pid": pid})


def refused(request: int, message: str) -> bytes:
    return _line({"id": request, "error": message})


def exited(pid: int, code: int) -> bytes:
    return _line({"exit": pid, "code": code})


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def title(argv: list[str], room: int) -> bytes:
    """The bytes of a command line `argv` in /proc/<pid>/cmdline form (NUL after each word) that fit in `room`,
    padded with NULs to fill it: words that do not fit whole are left out, so what is shown is never a cut word."""
    shown = b""
    for word in argv:
        encoded = word.encode(errors="surrogateescape").replace(b"\0", b"") + b"\0"
        if len(shown) + len(encoded) > room:
            break
        shown += encoded
    return shown.ljust(room, b"\0")
