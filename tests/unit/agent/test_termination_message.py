"""The agent's `init` (and `serve`) write their failure to the container's termination log when the kubelet provided
one (so the pod's last state, and from there the Workspace, says why the fetch or install failed), and write nothing
anywhere else."""

from __future__ import annotations

from pathlib import Path

from pko.agent import termination


def test_the_refusal_is_written_to_an_existing_termination_log(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    log.write_bytes(b"")
    termination.report_failure("unable to fetch git source: too large", log)
    assert log.read_text() == "unable to fetch git source: too large"


def test_nothing_is_written_without_a_termination_log(tmp_path: Path) -> None:
    termination.report_failure("unable to fetch git source: too large", tmp_path / "termination-log")
    assert list(tmp_path.iterdir()) == []


def test_the_message_is_cut_to_what_the_kubelet_keeps(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    log.write_bytes(b"")
    termination.report_failure("head " + "x" * 10_000 + " npm error 404 Not Found - GET /npm/nope", log)
    kept = log.read_bytes()
    assert len(kept) == termination.TERMINATION_MESSAGE_LIMIT
    # a tool's own error is at the end of its output: both ends survive
    assert kept.startswith(b"head x")
    assert kept.endswith(b"npm error 404 Not Found - GET /npm/nope")


def test_the_default_is_the_kubelets_path() -> None:
    assert str(termination.TERMINATION_LOG) == "/dev/termination-log"
