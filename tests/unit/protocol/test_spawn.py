"""The agent fork server's wire (pko.protocol.spawn): a request survives the trip and a malformed one is refused
without being quoted; a child's command line is shown whole words only, in exactly the room there is."""

from __future__ import annotations

import json

import pytest

from pko.protocol import spawn


def test_a_request_survives_the_trip() -> None:
    request = spawn.Spawn(7, ["serve", "--port", "5"], {"TOKEN": "s3cr3t", "EMPTY": ""}, "/tmp/ws")
    assert spawn.Spawn.from_bytes(request.to_bytes()) == request


@pytest.mark.parametrize("data", [
    b"not json", b"[]", b'{"id": "1", "argv": [], "env": {}, "cwd": "/"}',
    b'{"id": 1, "argv": ["serve", 5], "env": {}, "cwd": "/"}',
    b'{"id": 1, "argv": [], "env": {"TOKEN": 5}, "cwd": "/"}',
    b'{"id": 1, "argv": [], "env": {"TOKEN": "s3cr3t"}}',
])
def test_a_malformed_request_is_refused_without_its_contents(data: bytes) -> None:
    with pytest.raises(ValueError, match="spawn request") as refused:
        spawn.Spawn.from_bytes(data)
    assert "s3cr3t" not in str(refused.value)


def test_answers_are_one_json_line_each() -> None:
    lines = spawn.started(1, 42) + spawn.refused(2, "no such directory") + spawn.exited(42, -15)
    assert [json.loads(line) for line in lines.splitlines()] == [
        {"id": 1, "pid": 42}, {"id": 2, "error": "no such directory"}, {"exit": 42, "code": -15}]


def test_a_title_fills_its_room_with_whole_words() -> None:
    shown = spawn.title(["python", "-m", "pko", "agent", "serve"], 32)
    assert len(shown) == 32
    assert shown.rstrip(b"\0").split(b"\0") == [b"python", b"-m", b"pko", b"agent", b"serve"]
    cut = spawn.title(["python", "--workspace", "/a/very/long/path/that/does/not/fit"], 24)
    assert len(cut) == 24
    assert cut.rstrip(b"\0").split(b"\0") == [b"python", b"--workspace"]  # never half a path
    assert spawn.title(["a\0b"], 8).rstrip(b"\0") == b"ab"  # a NUL inside a word would split it
