"""An operation that ends while the API server is down keeps its result: the Update controller writes the outputs
Secret and the status once the API server is back, instead of dropping them (the Update would then read as
Aborted after a restart, and its Stack would run the same `up` a second time)."""

from __future__ import annotations

import asyncio
import base64

from pko.api import conditions
from pko.api import update as up_api
from pko.controllers import connect
from pko.controllers.update import plan
from pko.controllers.update.reconciler import UpdateReconciler
from pko.kube import client as kclient
from pko.kube import events, owners, resources
from pko.testing import controlplane


def _reconciler(kc: kclient.Client) -> UpdateReconciler:
    return UpdateReconciler(kc, connect.Connector(kc), events.Recorder(kc, "update-controller"),
                            events.Recorder(kc, "workspace-controller"))


async def _progressing_update(kc: kclient.Client, namespace: str, name: str) -> up_api.Update:
    created = await kc.create(resources.UPDATE.new(name, namespace, spec={
        "workspaceName": "ws", "stackName": "dev", "type": up_api.UP}))
    update = up_api.Update.model_validate(created)
    assert await _reconciler(kc).record(update, plan.started())
    return update


def _succeeded(update: up_api.Update) -> plan.Outcome:
    name = update.metadata.name or ""
    outcome = plan.from_result("succeeded", "", "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z", None,
                               {"name": "proj", "runtime": "yaml"}, f"{name}-stack-outputs")
    outcome.secret = owners.set_owner_reference(plan.outputs_secret(update, {"round": (b'"7"', False)}), update)
    return outcome


async def test_result_written_after_the_api_server_comes_back(
    chaos_plane: controlplane.ControlPlane, ckc: kclient.Client, cns: str,
) -> None:
    update = await _progressing_update(ckc, cns, "outage-up")
    outcome = _succeeded(update)
    api = chaos_plane.process("kube-apiserver")
    await asyncio.to_thread(api.halt)
    try:
        writing = asyncio.create_task(_reconciler(ckc).record(update, outcome))
        await asyncio.sleep(3)
        assert not writing.done(), "the result was given up on while the API server was down"
    finally:
        await asyncio.to_thread(chaos_plane.restart, "kube-apiserver")
    assert await asyncio.wait_for(writing, 120) is True

    saved = up_api.Update.model_validate(await ckc.get(resources.UPDATE, "outage-up", cns))
    assert saved.status is not None
    assert conditions.is_true(saved.status.conditions, conditions.COMPLETE)
    assert not conditions.is_true(saved.status.conditions, conditions.FAILED)
    assert saved.status.outputs == "outage-up-stack-outputs"
    secret = await ckc.get(resources.SECRET, "outage-up-stack-outputs", cns)
    assert base64.b64decode(secret["data"]["round"]) == b'"7"'


async def test_result_of_a_deleted_update_is_dropped(ckc: kclient.Client, cns: str) -> None:
    update = await _progressing_update(ckc, cns, "gone-up")
    await ckc.delete(resources.UPDATE, "gone-up", cns)
    assert await asyncio.wait_for(_reconciler(ckc).record(update, _succeeded(update)), 30) is False


async def test_a_result_the_api_server_refuses_is_not_retried_for_ever(ckc: kclient.Client, cns: str) -> None:
    update = await _progressing_update(ckc, cns, "refused-up")
    refused = plan.failed("not a reason!")  # a condition reason the CRD's pattern refuses: 422 on every attempt
    assert await asyncio.wait_for(_reconciler(ckc).record(update, refused), 30) is False
    saved = up_api.Update.model_validate(await ckc.get(resources.UPDATE, "refused-up", cns))
    assert saved.status is not None
    assert conditions.is_true(saved.status.conditions, conditions.PROGRESSING), "nothing was written"
