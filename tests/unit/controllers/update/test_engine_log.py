"""Engine events become structured log lines that `logging` accepts (reserved LogRecord keys would raise)."""

from __future__ import annotations

import logging

import pytest

from pko.api import update as up_api
from pko.controllers.update import plan


def test_engine_event_fields_are_loggable(caplog: pytest.LogCaptureFixture) -> None:
    update = up_api.Update.model_validate({
        "metadata": {"name": "s-1", "namespace": "team"}, "spec": {"stackName": "dev", "type": "up"}})
    event = {"sequence": 3, "diagnosticEvent": {"message": "hello from the program\n  ", "severity": "info"}}
    fields = plan.engine_log_fields(update, event)
    assert fields == {"namespace": "team", "stack_name": "dev", "update_name": "s-1",
                      "engine_event": "diagnosticEvent", "text": "hello from the program"}
    logger = logging.getLogger("pko.pulumi.test")
    with caplog.at_level(logging.INFO, logger="pko.pulumi.test"):
        logger.info("engine event", extra=fields)
    (record,) = caplog.records
    assert record.stack_name == "dev"  # type: ignore[attr-defined]
    assert record.engine_event == "diagnosticEvent"  # type: ignore[attr-defined]


def test_events_without_a_message() -> None:
    update = up_api.Update.model_validate({"metadata": {"name": "s-1", "namespace": "team"}})
    fields = plan.engine_log_fields(update, {"sequence": 1, "summaryEvent": {"resourceChanges": {}}})
    assert fields["engine_event"] == "summaryEvent"
    assert fields["text"] == ""
    assert fields["stack_name"] is None


def test_debug_diagnostics_are_not_logged() -> None:
    """The Python SDK's debug trace of a stack's outputs holds a secret output in clear: never log its text."""
    update = up_api.Update.model_validate({"metadata": {"name": "s-1", "namespace": "team"}})
    trace = ('register resource outputs prepared: urn=urn:pulumi:dev::p::pulumi:pulumi:Stack::p-dev, props=fields {'
             '\n  key: "token"\n  value { string_value: "s3cr3t-in-clear" } }')
    fields = plan.engine_log_fields(update, {"sequence": 7, "diagnosticEvent": {"message": trace,
                                                                                 "severity": "debug"}})
    assert "s3cr3t-in-clear" not in str(fields)
    assert fields["text"] == plan.DEBUG_DIAGNOSTIC_OMITTED
    warning = plan.engine_log_fields(update, {"diagnosticEvent": {"message": "careful", "severity": "warning"}})
    assert warning["text"] == "careful"
