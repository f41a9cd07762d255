"""What the CLI prints becomes the protocol's summaries, outputs and permalinks."""

from __future__ import annotations

import datetime
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


SECRET = {results.SIGNATURE_KEY: results.SECRET_SIGNATURE, "ciphertext": "[secret]"}


def _outputs_event(outputs: dict[str, object], type_: str = "pulumi:pulumi:Stack",
                   parent: str = "") -> dict[str, object]:
    return {"sequence": 5, "resOutputsEvent": {"metadata": {"op": "same", "new": {
        "type": type_, "urn": "urn:pulumi:dev::p::pulumi:pulumi:Stack::p-dev", "parent": parent, "outputs": outputs}}}}


def test_the_root_stacks_outputs_are_read_from_its_outputs_event() -> None:
    assert results.root_stack_outputs(_outputs_event({"a": 1})) == {"a": 1}
    assert results.root_stack_outputs(_outputs_event({"a": 1}, type_="random:index:Pet")) is None
    assert results.root_stack_outputs(_outputs_event({"a": 1}, parent="urn:pulumi:dev::p::x::y")) is None
    assert results.root_stack_outputs({"summaryEvent": {"result": "succeeded"}}) is None
    assert results.root_stack_outputs({"resOutputsEvent": "garbage"}) is None


def test_signatures_are_found_at_any_depth() -> None:
    assert not results.has_signature({"a": [1, {"b": "c"}], "d": None})
    assert results.has_signature({"a": [1, {"b": SECRET}]})
    assert results.is_secret(SECRET)
    assert not results.is_secret({"inner": SECRET})
    assert not results.is_secret({results.SIGNATURE_KEY: "c44067f5952c0a294b673a41bacd8c17", "path": "x"})  # asset


def test_outputs_from_the_event_alone_or_with_the_plain_listing() -> None:
    alone = results.outputs_from_event({"a": 1, "b": {"c": [True]}}, None)
    assert {k: (json.loads(v.value), v.secret) for k, v in alone.items()} == {"a": (1, False),
                                                                              "b": ({"c": [True]}, False)}
    seen = {"token": SECRET, "nested": {"inner": SECRET}}
    plain = json.dumps({"token": "shh", "nested": {"inner": "shh"}})
    both = results.outputs_from_event(seen, plain)
    assert {k: (json.loads(v.value), v.secret) for k, v in both.items()} == {"token": ("shh", True),
                                                                             "nested": ({"inner": "shh"}, False)}
    assert both == results.outputs(json.dumps({"token": "[secret]", "nested": {"inner": "[secret]"}}), plain)


def test_a_summary_of_the_agents_own_timing_is_to_the_second() -> None:
    started = datetime.datetime(2026, 1, 1, 12, 0, 0, 900000, tzinfo=datetime.UTC)
    summary = results.own_summary(started, started + datetime.timedelta(seconds=2), "succeeded", "hi")
    assert (summary.start_time.seconds, summary.start_time.nanos) == (int(started.timestamp()), 0)
    assert summary.end_time.seconds - summary.start_time.seconds == 2
    assert (summary.result, summary.message) == ("succeeded", "hi")
    assert results.summary_result({"summaryEvent": {"result": "failed"}}) == "failed"
    assert results.summary_result({"summaryEvent": {}}) is None
