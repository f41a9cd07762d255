"""Why a workspace pod is not running, in one sentence the Workspace's `Ready` message can carry.

The reference reports `WaitingForReplicas` and nothing more while a pod cannot start, so a Workspace whose image
cannot run under the `restricted` profile, or cannot be pulled, looks the same as one that is merely slow. The
kubelet already says what is wrong in the pod's container statuses; this module picks the first such statement
(init containers first, in order, as they run). Pure: a pod object in, a sentence or None out.

A container restarting after failures (``CrashLoopBackOff``) says only "back-off … restarting failed container";
why it failed is in its last termination message (pko's agent ``init`` writes its refusal there, as
``/dev/termination-log``), which is added, so a refused source reads the same as in the local runtime.
"""

from __future__ import annotations

from typing import Any

#: Waiting reasons that do not fix themselves: the pod needs a change (image, security context, config).
STUCK_REASONS = frozenset({
    "CreateContainerConfigError", "CreateContainerError", "RunContainerError", "InvalidImageName",
    "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "CrashLoopBackOff",
})


def problem(pod: dict[str, Any] | None) -> str | None:
    """The kubelet's reason a container of `pod` is stuck, as `container "x": Reason: message`, or None."""
    status = (pod or {}).get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason")
            if reason in STUCK_REASONS:
                message = (waiting.get("message") or "").strip()
                text = f'container "{container.get("name")}": {reason}' + (f": {message}" if message else "")
                terminated = (container.get("lastState") or {}).get("terminated") or {}
                last = (terminated.get("message") or "").strip()
                if last:
                    text += f"; it exited with {terminated.get('exitCode')}: {' '.join(last.split())}"
                return text
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False" and condition.get("message"):
            return f"pod not scheduled: {condition['message']}"
    return None
