"""What the CLI prints becomes the protocol's summaries, outputs and permalinks."""

from __future__ import annotations

import json

from pko.agent import results
from pko.agent.workspace import cli_version


def test_stack_summary_from_stack_ls() -> None:
    listing = json.dumps([
        {"name": "other", "current": False},
        {"name": "dev", "current": True, "lastUpdate": "2024-05-01T10:20:30.123456789Z", "updateInProgress": False,
         "resourceCount": 3, "url": "file:///state"},
    ])
    entry = results.current_stack(listing)
    assert entry is not None
    summary = results.stack_summary(entry)
    assert summary.name == "dev"
    assert summary.resource_count == 3
    assert summary.url == "file:///state"
    assert (summary.last_update.seconds, summary.last_update.nanos) == (1714558830, 123456789)


def test_no_current_stack_and_sparse_entries() -> None:
    assert results.current_stack("[]") is None
    summary = results.stack_summary({"name": "dev", "current": True})
    assert not summary.HasField("last_update")
    assert not summary.HasField("resource_count")
    assert summary.HasField("url")  # always present, possibly empty, like the reference


def test_update_summary_from_history() -> None:
    history = json.dumps([{"kind": "update", "startTime": "2024-05-01T10:20:30.000Z", "endTime": "2024-05-01T10:21:00Z",
                           "result": "succeeded", "message": "msg", "resourceChanges": {"create": 1}}])
    summary = results.update_summary(history)
    assert summary is not None
    assert (summary.result, summary.message) == ("succeeded", "msg")
    assert summary.end_time.seconds - summary.start_time.seconds == 30
    assert results.update_summary("[]") is None


def test_unparsable_times_are_left_unset() -> None:
    summary = results.update_summary(json.dumps([{"startTime": "yesterday", "result": "failed", "message": ""}]))
    assert summary is not None
    assert not summary.HasField("start_time")
    assert results.timestamp("2024-05-01T10:20:30+02:00") is not None
    assert results.timestamp("") is None


def test_outputs_flag_secrets_and_encode_like_go() -> None:
    masked = json.dumps({"a": "x", "n": 1.0, "obj": {"z": 1, "a": [True]}, "tok": "[secret]"})
    plain = json.dumps({"a": "x", "n": 1.0, "obj": {"z": 1, "a": [True]}, "tok": "hush"})
    outputs = results.outputs(masked, plain)
    assert {k: (v.value, v.secret) for k, v in outputs.items()} == {
        "a": (b'"x"', False), "n": (b"1", False), "obj": (b'{"a":[true],"z":1}', False), "tok": (b'"hush"', True)}


def test_permalink() -> None:
    assert results.permalink("Updating (dev)\n\nView Live: https://app.pulumi.com/o/p/dev/updates/3\n") == (
        "https://app.pulumi.com/o/p/dev/updates/3")
    assert results.permalink("View in Browser (Ctrl+O): https://x/y\n") == "https://x/y"
    assert results.permalink("Updating (dev):\nResources:\n") is None


def test_project_info_and_version() -> None:
    assert results.project_info({"name": "p", "runtime": {"name": "python", "options": {}}}).runtime == "python"
    assert results.project_info({"name": "p", "runtime": "yaml"}).name == "p"
    assert cli_version("v3.259.0\n") == "3.259.0"
