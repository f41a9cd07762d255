"""Every log line of a reconcile carries the object (``controller``, ``namespace``, ``name``, and ``update`` once
bound) as fields of the console and JSON encodings, not in the message; expected failures log one line without a
traceback, others with it."""

from __future__ import annotations

import io
import json
import logging

import httpx2

from pko.kube import errors, objects
from pko.runtime import controller, logcontext, workqueue

log = logging.getLogger("pko.test.reconcile")


def _json(streams: dict[str, io.StringIO]) -> list[dict[str, object]]:
    return [json.loads(line) for line in streams["json"].getvalue().splitlines()]


def test_both_encodings_carry_the_bound_fields(printed_logs: dict[str, io.StringIO]) -> None:
    with logcontext.scope(controller="stack-controller", namespace="team", name="app"):
        logcontext.bind(update="app-1a2b")
        log.info("working", extra={"step": "sync"})
    log.info("outside")

    inside, outside = _json(printed_logs)
    assert inside["event"] == "working"
    assert {k: inside[k] for k in ("controller", "namespace", "name", "update", "step")} == {
        "controller": "stack-controller", "namespace": "team", "name": "app", "update": "app-1a2b", "step": "sync"}
    assert not {"controller", "namespace", "name", "update"} & outside.keys()
    console = printed_logs["console"].getvalue().splitlines()[0]
    for pair in ("controller=stack-controller", "namespace=team", "name=app", "update=app-1a2b", "step=sync"):
        assert pair in console
    assert "team/app" not in console


def test_a_scope_drops_what_was_bound_inside_it() -> None:
    with logcontext.scope(controller="c", namespace="n", name="x"):
        logcontext.bind(update="u")
        assert logcontext.fields() == {"controller": "c", "namespace": "n", "name": "x", "update": "u"}
    assert logcontext.fields() == {}


async def _process(reconcile: controller.Reconciler) -> None:
    queue: workqueue.WorkQueue[objects.ObjectKey] = workqueue.WorkQueue()
    worker = controller.Controller("test-controller", reconcile)
    await worker.process(queue, objects.ObjectKey("team", "app"))
    queue.shutdown()


async def test_a_reconcile_logs_with_its_object(printed_logs: dict[str, io.StringIO]) -> None:
    async def reconcile(key: objects.ObjectKey) -> controller.Result | None:
        log.info("reconciling")
        return None

    await _process(reconcile)
    (line,) = _json(printed_logs)
    assert line["event"] == "reconciling"
    assert (line["controller"], line["namespace"], line["name"]) == ("test-controller", "team", "app")


async def test_expected_failures_log_one_line_without_a_traceback(printed_logs: dict[str, io.StringIO]) -> None:
    async def reconcile(key: objects.ObjectKey) -> controller.Result | None:
        try:
            raise errors.NotFound(404, "NotFound", 'secrets "creds" not found')
        except errors.NotFound as err:
            raise RuntimeError(f"reading the credentials: {err}") from err

    await _process(reconcile)
    (line,) = _json(printed_logs)
    assert line["level"] == "error"
    assert line["event"].startswith("reconcile failed: reading the credentials")  # type: ignore[union-attr]
    assert line["name"] == "app"
    assert "exception" not in line
    assert "Traceback" not in printed_logs["console"].getvalue()


async def test_an_unreachable_api_server_logs_one_line(printed_logs: dict[str, io.StringIO]) -> None:
    """While the API server restarts every reconcile fails to connect: one line each, no traceback (chaos tier)."""
    async def reconcile(key: objects.ObjectKey) -> controller.Result | None:
        raise httpx2.ConnectError("All connection attempts failed")

    await _process(reconcile)
    (line,) = _json(printed_logs)
    assert line["event"] == "reconcile failed: All connection attempts failed"
    assert "exception" not in line
    assert "Traceback" not in printed_logs["console"].getvalue()


async def test_unexpected_failures_keep_their_traceback(printed_logs: dict[str, io.StringIO]) -> None:
    async def reconcile(key: objects.ObjectKey) -> controller.Result | None:
        raise KeyError("spec")

    await _process(reconcile)
    (line,) = _json(printed_logs)
    assert "KeyError" in str(line["exception"])
    assert "Traceback" in printed_logs["console"].getvalue()
