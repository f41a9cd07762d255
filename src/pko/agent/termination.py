"""The container's termination message: where a failing agent command says why, for the kubelet to keep.

A refusal of ``agent init`` or a failure of ``agent serve`` (an install that fails) is logged and, in a pod, also
written to the termination log: the kubelet shows it in the container's last state, where the Workspace's `Ready`
message picks it up, rather than only "back-off restarting failed container". Its own module because both commands
report through it and neither should import the other: ``serve`` has no use for ``init``'s git client (dulwich),
which would add to every workspace pod's start.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

TERMINATION_LOG = Path("/dev/termination-log")  # the kubelet's default terminationMessagePath
TERMINATION_MESSAGE_LIMIT = 4096  # bytes the kubelet keeps of it


def report_failure(message: str, path: Path = TERMINATION_LOG) -> None:
    """Write `message` to the termination log when there is one: the kubelet creates (and mounts) it in a pod;
    elsewhere (the local runtime, a laptop) it does not exist and nothing is written. Best effort: failing to
    report must not hide the failure itself."""
    if not path.is_file():
        return
    data = message.encode()
    if len(data) > TERMINATION_MESSAGE_LIMIT:  # a tool's own error comes last: keep the head and the tail
        head = TERMINATION_MESSAGE_LIMIT // 4
        data = data[:head] + b"\n...\n" + data[len(data) - (TERMINATION_MESSAGE_LIMIT - head - 5):]
    with contextlib.suppress(OSError):
        path.write_bytes(data)
