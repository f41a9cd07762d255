"""Why a workspace pod is not running, in one sentence the Workspace's `Ready` message can carry.

The reference reports `WaitingForReplicas` and nothing more while a pod cannot start, so a Workspace whose image
cannot run under the `restricted` profile, or cannot be pulled, looks the same as one that is merely slow. The
kubelet already says what is wrong in the pod's container statuses; this module picks the first such statement
(init containers first, in order, as they run). Pure: a pod object in, a sentence or None out.

A container restarting after failures (``CrashLoopBackOff``) says only "back-off … restarting failed container";
why it failed is in its last termination message (pko's agent ``init`` writes its refusal there, as
``/dev/termination-log``), which is added, so a refused source reads the same as in the local runtime.

When there is no pod at all, the StatefulSet controller could not create it — a ResourceQuota, a LimitRange, the
namespace's Pod Security level or an admission webhook refused it — and says so only in a ``FailedCreate`` event on
the StatefulSet (a StatefulSet has no condition for it); :func:`refused` reads the newest such event of that very
StatefulSet, so a Workspace stuck there says why instead of waiting for a pod forever.
"""

from __future__ import annotations

import datetime
import re
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


#: The StatefulSet controller's event when the API server refuses the pod it creates.
FAILED_CREATE = "FailedCreate"


def refused(events: list[dict[str, Any]], statefulset_uid: str, since: str | None = None) -> str | None:
    """Why the StatefulSet (by uid: not an earlier one of the same name) could not create its pod, from the newest
    of its `FailedCreate` events (none last told before `since`: a refusal the last time the pod was made, fixed
    since, is not this one's), as `pod not created: <the API server's refusal>`; None when it has none."""
    def when(event: dict[str, Any]) -> datetime.datetime:  # when it was last told (a series: its last repeat)
        return _moment((event.get("series") or {}).get("lastObservedTime") or event.get("lastTimestamp")
                       or event.get("eventTime") or (event.get("metadata") or {}).get("creationTimestamp"))
    start = _moment(since)
    own = [e for e in events if e.get("reason") == FAILED_CREATE
           and (e.get("involvedObject") or {}).get("uid") == statefulset_uid and e.get("message")
           and when(e) >= start]
    if not own:
        return None
    message = " ".join(str(max(own, key=when)["message"]).split())
    # "create Pod x-workspace-0 in StatefulSet x-workspace failed error: pods "x-workspace-0" is forbidden: …"
    _, sep, why = message.partition(" failed error: ")
    return shortened(f"pod not created: {why if sep else message}")


#: The longest API server text a Workspace's status quotes: an admission webhook's or a policy's message has no
#: bound of its own, and a condition's message longer than 32,768 characters would make every status write fail.
MAX_QUOTED = 2048


def shortened(message: str, limit: int = MAX_QUOTED) -> str:
    """`message`, cut to `limit` characters with an ellipsis when longer."""
    return message if len(message) <= limit else message[:limit - 1] + "…"


def same_refusal(told: str | None, now: str) -> bool:
    """Whether `now` says what `told` said, numbers aside: a quota's refusal quotes what the namespace uses
    (``used: pods=7``), which moves with every other pod there; each move is not news worth an event and a write."""
    return told is not None and _DIGITS.sub("#", told) == _DIGITS.sub("#", now)


_DIGITS = re.compile(r"\d+")

#: The API server's refusal of a StatefulSet update that changes a field other than those a StatefulSet lets
#: change in place (``spec: Forbidden: updates to statefulset spec for fields other than 'replicas', …``).
_IMMUTABLE = "updates to statefulset spec for fields other than"


def immutable_change(details: dict[str, Any], message: str) -> bool:
    """Whether an Invalid refusal of a StatefulSet update is the one a migration answers (delete it, create it
    again: the reference's `Migrated`), rather than a template the API server or an admission policy refuses."""
    for cause in details.get("causes") or []:
        if isinstance(cause, dict) and cause.get("field") == "spec" and _IMMUTABLE in str(cause.get("message")):
            return True
    return _IMMUTABLE in message


def _moment(value: object) -> datetime.datetime:
    """A time on the wire (whole seconds, or an event's microseconds); the earliest time when absent or unreadable."""
    try:
        found = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        return found if found.tzinfo is not None else found.replace(tzinfo=datetime.UTC)
    except ValueError:
        return datetime.datetime.min.replace(tzinfo=datetime.UTC)


def dropped_image_volumes(sent: dict[str, Any], applied: dict[str, Any]) -> list[str]:
    """The `image` volumes of the StatefulSet pko `sent` that the API server left out of the one it `applied`: an
    API server that does not serve image volumes (Kubernetes before 1.35 without the ``ImageVolume`` gate) drops
    them and their mounts without a word — the agent's (``--workspace-agent-image-volume``: the pod cannot start)
    or a plugin's (the plugin is then downloaded as without it)."""
    def volumes(statefulset: dict[str, Any]) -> list[Any]:
        return (((statefulset.get("spec") or {}).get("template") or {}).get("spec") or {}).get("volumes") or []
    kept = {v.get("name") for v in volumes(applied) if isinstance(v, dict)}
    return [str(v.get("name")) for v in volumes(sent)
            if isinstance(v, dict) and "image" in v and v.get("name") not in kept]


def dropped_message(names: list[str]) -> str:
    return (f"the API server dropped the image volume{'s' if len(names) > 1 else ''} {', '.join(names)}: this "
            "cluster does not serve image volumes (Kubernetes 1.35, or 1.31-1.34 with the ImageVolume feature gate)")
