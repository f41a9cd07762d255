"""Every log line of a reconcile carries the object (``controller``, ``namespace``, ``name``, and ``update`` once
bound) as fields of the console and JSON encodings, not in the message; expected failures log one line without a
traceback, others with it."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from pko.cli import logs
from pko.kube import errors, objects
from pko.runtime import controller, logcontext, workqueue

log = logging.getLogger("pko.test.reconcile")


@pytest.fixture
def lines() -> Iterator[dict[str, io.StringIO]]:
    """What the operator's two encodings print for the records logged during the test."""
    streams = {"json": io.StringIO(), "console": io.StringIO()}
    handlers = []
    for encoding, stream in streams.items():
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logs.formatter(json_lines=encoding == "json"))
        handlers.append(handler)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    root.handlers.extend(handlers)
    try:
        yield streams
    finally:
        for handler in handlers:
            root.removeHandler(handler)
        root.setLevel(level)


def _json(streams: dict[str, io.StringIO]) -> list[dict[str, object]]:
    return [json.loads(line) for line in streams["json"].getvalue().splitlines()]


def test_both_encodings_carry_the_bound_fields(lines: dict[str, io.StringIO]) -> None:
    with logcontext.scope(controller="stack-controller", namespace="team", name="app"):
        logcontext.bind(update="app-1a2b")
        log.info("working", extra={"step": "sync"})
    log.info("outside")

    inside, outside = _json(lines)
    assert inside["event"] == "working"
    assert {k: inside[k] for k in ("controller", "namespace", "name", "update", "step")} == {
        "controller": "stack-controller", "namespace": "team", "name": "app", "update": "app-1a2b", "step": "sync"}
    assert not {"controller", "namespace", "name", "update"} & outside.keys()
    console = lines["console"].getvalue().splitlines()[0]
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


async def test_a_reconcile_logs_with_its_object(lines: dict[str, io.StringIO]) -> None:
    async def reconcile(key: objects.ObjectKey) -> controller.Result | None:
        log.info("reconciling")
        return None

    await _process(reconcile)
    (line,) = _json(lines)
    assert line["event"] == "reconciling"
    assert (line["controller"], line["namespace"], line["name"]) == ("test-controller", "team", "app")


async def test_expected_failures_log_one_line_without_a_traceback(lines: dict[str, io.StringIO]) -> None:
    async def reconcile(key: objects.ObjectKey) -> controller.Result | None:
        try:
            raise errors.NotFound(404, "NotFound", 'secrets "creds" not found')
        except errors.NotFound as err:
            raise RuntimeError(f"reading the credentials: {err}") from err

    await _process(reconcile)
    (line,) = _json(lines)
    assert line["level"] == "error"
    assert line["event"].startswith("reconcile failed: reading the credentials")  # type: ignore[union-attr]
    assert line["name"] == "app"
    assert "exception" not in line
    assert "Traceback" not in lines["console"].getvalue()


async def test_unexpected_failures_keep_their_traceback(lines: dict[str, io.StringIO]) -> None:
    async def reconcile(key: objects.ObjectKey) -> controller.Result | None:
        raise KeyError("spec")

    await _process(reconcile)
    (line,) = _json(lines)
    assert "KeyError" in str(line["exception"])
    assert "Traceback" in lines["console"].getvalue()
