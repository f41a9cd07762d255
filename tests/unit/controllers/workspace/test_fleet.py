"""pko's fleet rules (pko.controllers.workspace.fleet): which spec changes keep the pod (config values only), when a
config is due on a running agent, and when a workspace sleeps or wakes (scale to zero)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from pko.api import names
from pko.api import update as up_api
from pko.api import workspace as ws_api
from pko.api.meta import Condition
from pko.controllers.workspace import fleet, manifests

AGENT = manifests.AgentImage("example.com/pko:1.2.3")
NOW = datetime.datetime(2026, 11, 22, 12, 0, 0, tzinfo=datetime.UTC)
CONFIG = [{"key": "greeting", "value": "hello", "secret": False},
          {"key": "cm", "valueFrom": {"path": "/var/run/configmaps/cm/key"}, "secret": False}]


def _workspace(generation: int = 3, config: list[dict[str, Any]] | None = None, applied: dict[str, Any] | None = None,
               **spec: Any) -> ws_api.Workspace:
    body: dict[str, Any] = {"git": {"url": "u", "ref": "a"}, "env": [{"name": "A", "value": "1"}],
                            "stacks": [{"name": "dev", "config": CONFIG if config is None else config}], **spec}
    return ws_api.Workspace.model_validate({
        "metadata": {"name": "ws", "namespace": "ns", "generation": generation}, "spec": body,
        "status": {"applied": applied} if applied else None})


def _hash(ws: ws_api.Workspace) -> str:
    revision = fleet.pod_revision(ws, manifests.pod_digest(ws))
    annotations = manifests.statefulset(ws, AGENT, pod_generation=revision.generation)["spec"]["template"]["metadata"][
        "annotations"]
    return str(annotations["auto.pulumi.com/revision-hash"])


def _recorded(ws: ws_api.Workspace) -> dict[str, Any]:
    revision = fleet.pod_revision(ws, manifests.pod_digest(ws))
    return {"podGeneration": revision.generation, "podDigest": revision.digest, "configGeneration": 3}


def test_config_values_keep_the_pod_and_anything_else_rolls_it() -> None:
    placed = _workspace(generation=3)
    applied = _recorded(placed)
    before = _hash(placed)
    # Without a record the revision follows the generation, exactly as before pko's rule.
    assert before == manifests.revision_hash(placed)

    values = [{**CONFIG[0], "value": "bonjour"}, {"key": "cm", "valueFrom": {"path": "/other/key"}, "secret": True}]
    assert _hash(_workspace(generation=4, config=values, applied=applied)) == before
    assert _hash(_workspace(generation=4, idleTimeout="10m", applied=applied)) == before

    # A key added or removed, the path flag, the env, the source, the stack's environment: a new pod.
    for changed in (_workspace(generation=4, config=[*CONFIG, {"key": "new", "value": "x"}], applied=applied),
                    _workspace(generation=4, config=CONFIG[:1], applied=applied),
                    _workspace(generation=4, config=[{**CONFIG[0], "path": True}, CONFIG[1]], applied=applied),
                    _workspace(generation=4, env=[{"name": "A", "value": "2"}], applied=applied),
                    _workspace(generation=4, git={"url": "u", "ref": "b"}, applied=applied),
                    _workspace(generation=4, stacks=[{"name": "dev", "config": CONFIG, "environment": ["e"]}],
                               applied=applied)):
        assert _hash(changed) != before
        assert fleet.pod_revision(changed, manifests.pod_digest(changed)).generation == 4


def test_with_config_in_place_off_a_config_value_rolls_the_pod() -> None:
    """``--workspace-config-in-place=false``: the Go operator's rule, every change a new pod."""
    placed = _workspace(generation=3)
    applied = _recorded(placed)
    changed = _workspace(generation=4, config=[{**CONFIG[0], "value": "bonjour"}, *CONFIG[1:]], applied=applied)
    assert fleet.pod_revision(changed, manifests.pod_digest(changed)).generation == 3
    assert fleet.pod_revision(changed, manifests.pod_digest(changed), in_place=False).generation == 4


def test_config_is_due_until_this_generation_is_applied() -> None:
    assert fleet.config_due(None, 3)
    assert fleet.config_due(ws_api.AppliedState(pod_generation=3, pod_digest="d"), 3)
    assert fleet.config_due(ws_api.AppliedState(pod_generation=3, pod_digest="d", config_generation=3), 4)
    assert not fleet.config_due(ws_api.AppliedState(pod_generation=3, pod_digest="d", config_generation=4), 4)


@pytest.mark.parametrize(("spec", "default", "seconds"), [
    (None, 0.0, 0.0), (None, 600.0, 600.0), ("15m", 0.0, 900.0), ("0s", 600.0, 0.0), ("0", 600.0, 0.0),
    ("1h30m", 0.0, 5400.0),
])
def test_idle_timeout_the_workspace_overrides_the_operator(spec: str | None, default: float, seconds: float) -> None:
    ws = _workspace() if spec is None else _workspace(idleTimeout=spec)
    assert fleet.idle_timeout(ws, default) == seconds


def _ready(status: str, reason: str, since: datetime.datetime) -> Condition:
    return Condition.model_validate({"type": "Ready", "status": status, "reason": reason, "message": "",
                                     "lastTransitionTime": since.strftime("%Y-%m-%dT%H:%M:%SZ")})


def _update(complete_at: datetime.datetime | None) -> up_api.Update:
    conditions = [] if complete_at is None else [
        {"type": "Complete", "status": "True", "reason": "Updated", "message": "",
         "lastTransitionTime": complete_at.strftime("%Y-%m-%dT%H:%M:%SZ")}]
    return up_api.Update.model_validate({"metadata": {"name": "u"}, "status": {"conditions": conditions}})


def test_a_healthy_idle_workspace_sleeps_after_the_timeout() -> None:
    minute = datetime.timedelta(minutes=1)
    ready = _ready("True", "Succeeded", NOW - 30 * minute)
    assert fleet.decide(0, NOW, ready, []) == fleet.AWAKE  # off
    assert fleet.decide(600, NOW, ready, []) == fleet.Idle(True)
    assert fleet.decide(3600, NOW, ready, []) == fleet.Idle(False, 1800.0)
    # The last Update's completion restarts the clock.
    assert fleet.decide(600, NOW, ready, [_update(NOW - 2 * minute)]) == fleet.Idle(False, 480.0)
    # An Update pending keeps it awake, whatever the clock says.
    assert fleet.decide(600, NOW, ready, [_update(NOW - 60 * minute), _update(None)]) == fleet.AWAKE


def test_only_a_ready_workspace_falls_asleep_and_only_an_update_wakes_one() -> None:
    long_ago = NOW - datetime.timedelta(hours=5)
    assert fleet.decide(600, NOW, _ready("False", "WaitingForReplicas", long_ago), []) == fleet.AWAKE
    assert fleet.decide(600, NOW, None, []) == fleet.AWAKE
    sleeping = _ready("True", fleet.SLEEPING, long_ago)
    assert fleet.sleeping([sleeping])
    assert fleet.decide(600, NOW, sleeping, [_update(NOW)]) == fleet.Idle(True)
    assert fleet.decide(600, NOW, sleeping, [_update(None)]) == fleet.AWAKE
    assert fleet.sleeping_message(600) == ("Scaled to zero after 10m0s without an update; the next update wakes the "
                                           "workspace")


def _preview(name: str, created: datetime.datetime, *, save_plan: bool = True, failed: bool = False,
             type_: str = "preview") -> up_api.Update:
    stamp = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    found = [{"type": "Complete", "status": "True", "reason": "Updated", "message": "", "lastTransitionTime": stamp},
             {"type": "Failed", "status": "True" if failed else "False", "reason": "UpdateFailed", "message": "",
              "lastTransitionTime": stamp}]
    return up_api.Update.model_validate({
        "metadata": {"name": name, "creationTimestamp": stamp,
                     "annotations": {names.ANNOTATION_SAVE_PLAN: "true"} if save_plan else {}},
        "spec": {"type": type_}, "status": {"conditions": found}})


def test_a_plan_awaiting_its_approval_keeps_the_workspace_awake() -> None:
    hour = datetime.timedelta(hours=1)
    ready = _ready("True", "Succeeded", NOW - 5 * hour)
    awaiting = _preview("s-2", NOW - 2 * hour)
    assert fleet.holds_plan([_preview("s-1", NOW - 3 * hour, type_="up"), awaiting])
    assert fleet.decide(600, NOW, ready, [awaiting]) == fleet.AWAKE
    # not once the approved `up` (a later Update) has run, nor for a failed or a plain preview
    applied = _preview("s-3", NOW - hour, save_plan=False, type_="up")
    assert not fleet.holds_plan([awaiting, applied])
    assert fleet.decide(600, NOW, ready, [awaiting, applied]) == fleet.Idle(True)
    assert not fleet.holds_plan([_preview("s-4", NOW, failed=True)])
    assert not fleet.holds_plan([_preview("s-5", NOW, save_plan=False)])
    assert not fleet.holds_plan([])


def test_a_refusal_is_tried_again_every_so_often_and_at_once_after_a_restart() -> None:
    """A Workspace Stalled because the API server refused its StatefulSet or Service tries again `every` seconds
    since its last try, in or out of the pool (an admission policy may be what changes); with no try known to this
    process, now; any other Stalled reason waits for a new spec."""
    now = datetime.datetime(2026, 12, 7, 12, 0, tzinfo=datetime.UTC)
    tried = now - datetime.timedelta(seconds=100)
    assert fleet.refusal_retry_in("StatefulSetInvalid", tried, now, 300.0) == 200.0
    assert fleet.refusal_retry_in("ServiceInvalid", tried, now, 60.0) == 0.0
    assert fleet.refusal_retry_in("StatefulSetInvalid", None, now, 300.0) == 0.0
    assert fleet.refusal_retry_in("IncompatibleConfiguration", tried, now, 300.0) is None
