"""The agent's saved update plans (pko approvals): kept under their SHA-256, found only while the bytes still hash
to it, applied once; the change summary is read from the engine's summary event."""

from __future__ import annotations

import hashlib
from pathlib import Path

import grpc
import pytest

from pko.agent import plans
from pko.agent.errors import AgentError
from pko.protocol import status


def test_a_plan_is_kept_by_digest_and_found_once(tmp_path: Path) -> None:
    store = plans.PlanStore(tmp_path)
    written = store.scratch()
    written.write_text('{"manifest": {}}')
    digest = store.keep(written)
    assert digest == hashlib.sha256(b'{"manifest": {}}').hexdigest()
    assert not written.exists()
    assert store.path_of(digest).read_text() == '{"manifest": {}}'
    assert (tmp_path / plans.PLAN_DIR).stat().st_mode & 0o777 == 0o700
    store.discard(digest)
    with pytest.raises(AgentError) as gone:
        store.path_of(digest)
    assert gone.value.rpc.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "new preview" in gone.value.rpc.message
    # the operator tells "nothing ran: preview anew" from a failed up by this reason (pko.protocol.status)
    info = gone.value.rpc.error_info
    assert info is not None
    assert (info.reason, info.message) == (status.REASON_PLAN_NOT_FOUND, gone.value.rpc.message)
    assert status.error_info(gone.value.rpc.trailing_metadata()) == info


def test_a_changed_plan_or_a_bad_digest_is_refused(tmp_path: Path) -> None:
    store = plans.PlanStore(tmp_path)
    written = store.scratch()
    written.write_text("reviewed")
    digest = store.keep(written)
    (tmp_path / plans.PLAN_DIR / f"{digest}.json").write_text("tampered")
    with pytest.raises(AgentError) as changed:
        store.path_of(digest)
    assert changed.value.rpc.code == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(AgentError) as bad:
        store.path_of("../../etc/passwd")
    assert bad.value.rpc.code == grpc.StatusCode.INVALID_ARGUMENT


def test_the_change_summary_comes_from_the_summary_event() -> None:
    event = {"sequence": 9, "summaryEvent": {"resourceChanges": {"create": 2.0, "same": 1.0}}}
    assert plans.change_summary(event) == {"create": 2, "same": 1}
    assert plans.change_summary({"summaryEvent": {}}) == {}
    assert plans.change_summary({"resourcePreEvent": {}}) is None


def test_a_destroy_digest_names_the_set_of_resources_it_deletes() -> None:
    assert plans.deleted_urn({"resourcePreEvent": {"metadata": {"op": "delete", "urn": "urn:a"}}}) == "urn:a"
    assert plans.deleted_urn({"resourcePreEvent": {"metadata": {"op": "same", "urn": "urn:a"}}}) is None
    assert plans.deleted_urn({"summaryEvent": {}}) is None
    assert plans.destroy_digest(["urn:b", "urn:a", "urn:a"]) == plans.destroy_digest(["urn:a", "urn:b"])
    assert plans.destroy_digest(["urn:a"]) != plans.destroy_digest(["urn:a", "urn:b"])
    assert plans.destroy_digest(["urn:a", "urn:b"]) == hashlib.sha256(b"urn:a\nurn:b").hexdigest()
