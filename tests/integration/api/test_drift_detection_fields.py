"""pko's `spec.driftDetection` on the real API server: a schedule it cannot run is refused with the server's own
message naming the field and what is wrong (so `kubectl apply` tells the user), a meaningful one is stored as
written in both served versions, and a Stack without it stores nothing new."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from crd_testlib import create
from lightkube import ApiError, Client

STACK: dict[str, Any] = {
    "apiVersion": "pulumi.com/v1",
    "kind": "Stack",
    "metadata": {"name": "drift"},
    "spec": {"stack": "acme/app/dev", "projectRepo": "https://github.com/acme/app", "branch": "main"},
}
PREFIX = 'Stack.pulumi.com "drift" is invalid: '
DURATION = "must be a duration such as 30m, 6h or 1h30m: numbers with units (s, m, h), no sign"
CRON = ("cron must be a cron expression of five fields, minute hour day-of-month month day-of-week (UTC), such as "
        '"0 */6 * * *", or one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly')


def _with(**drift: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(STACK)
    manifest["spec"]["driftDetection"] = drift
    return manifest


def _invalid(field: str, message: str) -> str:
    """The API server's message for a failed CEL rule: the path, the value's type (never the value), ours."""
    if field:
        return f'{PREFIX}spec.driftDetection.{field}: Invalid value: "string": {message}'
    return f'{PREFIX}spec.driftDetection: Invalid value: "object": {message}'


@pytest.mark.parametrize(("manifest", "message"), [
    pytest.param(_with(cron="0 3 * *"), _invalid("cron", CRON), id="cron-four-fields"),
    pytest.param(_with(cron="61 * * * *"), _invalid("cron", CRON), id="cron-minute-out-of-range"),
    pytest.param(_with(cron="*/0 * * * *"), _invalid("cron", CRON), id="cron-zero-step"),
    pytest.param(_with(cron="0 0 * * funday"), _invalid("cron", CRON), id="cron-bad-weekday"),
    pytest.param(_with(cron="@every 5m"), _invalid("cron", CRON), id="cron-unknown-macro"),
    pytest.param(_with(interval="5"), _invalid("interval", f"interval {DURATION}"), id="interval-no-unit"),
    pytest.param(_with(interval="-1h"), _invalid("interval", f"interval {DURATION}"),
                 id="interval-negative"),
    pytest.param(_with(interval="1 hour"), _invalid("interval", f"interval {DURATION}"),
                 id="interval-words"),
    pytest.param(_with(interval="5s"), _invalid("interval", "interval must be at least 10s"),
                 id="interval-too-short"),
    pytest.param(_with(interval="0s"), _invalid("interval", "interval must be at least 10s"),
                 id="interval-zero"),
    pytest.param(_with(interval="1h", jitter="-5m"), _invalid("jitter", f"jitter {DURATION}"),
                 id="jitter-negative"),
    pytest.param(_with(interval="10m", jitter="1h"), _invalid("", "jitter must not be longer than interval"),
                 id="jitter-longer-than-interval"),
    pytest.param(_with(interval="1h", cron="0 * * * *"), _invalid("", "set exactly one of interval or cron"),
                 id="interval-and-cron"),
    pytest.param(_with(remediate=True), _invalid("", "set exactly one of interval or cron"),
                 id="no-schedule"),
    pytest.param(_with(interval="1h", remediate="yes"),
                 f'{PREFIX}[spec.driftDetection.remediate: Invalid value: "string": spec.driftDetection.remediate in '
                 'body must be of type boolean: "string", <nil>: Invalid value: null: some validation rules were not '
                 'checked because the object was invalid; correct the existing errors to complete validation]',
                 id="remediate-not-a-boolean"),
])
def test_a_schedule_that_cannot_run_is_refused(client: Client, namespace: str, manifest: dict[str, Any],
                                               message: str) -> None:
    with pytest.raises(ApiError) as refused:
        create(client, manifest, namespace)
    assert refused.value.status.code == 422
    assert refused.value.status.message == message


SCHEDULES = {
    "interval": {"interval": "1h30m", "jitter": "10m", "remediate": True},
    "shortest-interval": {"interval": "10s"},
    "cron": {"cron": "0 */6 * * *", "jitter": "15m"},
    "cron-names": {"cron": "30 2 1-15 jan,JUL MON-FRI"},
    "cron-macro": {"cron": "@daily", "remediate": False},
}


@pytest.mark.parametrize("api_version", ["pulumi.com/v1", "pulumi.com/v1alpha1"])
@pytest.mark.parametrize("label", sorted(SCHEDULES))
def test_a_meaningful_schedule_is_stored_as_written(client: Client, namespace: str, api_version: str,
                                                    label: str) -> None:
    manifest = _with(**SCHEDULES[label])
    manifest["apiVersion"] = api_version
    manifest["metadata"]["name"] = f"stored-{api_version.rpartition('/')[2]}-{label}"
    stored = create(client, manifest, namespace)
    assert stored["spec"]["driftDetection"] == SCHEDULES[label]


def test_a_stack_without_it_gets_no_defaults(client: Client, namespace: str) -> None:
    manifest = copy.deepcopy(STACK)
    manifest["metadata"]["name"] = "plain"
    stored = create(client, manifest, namespace)
    assert stored["spec"] == STACK["spec"]
    assert "drift" not in (stored.get("status") or {})
