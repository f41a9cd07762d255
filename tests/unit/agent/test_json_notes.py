"""The agent's small JSON notes (pko.agent.jsonnote): written whole or not at all, read back as an object or as
nothing, never failing what they only speed up."""

from __future__ import annotations

from pathlib import Path

import pytest

from pko.agent import jsonnote


def test_a_note_is_read_back_as_written_and_replaced_whole(tmp_path: Path) -> None:
    note = tmp_path / "notes" / "versions.json"
    assert jsonnote.write(note, {"pulumi": "3.259.0"})  # the folder is made
    assert jsonnote.read(note) == {"pulumi": "3.259.0"}
    assert jsonnote.write(note, {"other": 1})
    assert jsonnote.read(note) == {"other": 1}
    assert [p.name for p in note.parent.iterdir()] == ["versions.json"]  # no temporary file left


@pytest.mark.parametrize("text", ["", "{not json", "[1, 2]", '"a string"'])
def test_a_missing_or_broken_note_reads_as_an_empty_one(tmp_path: Path, text: str) -> None:
    note = tmp_path / "note.json"
    assert jsonnote.read(note) == {}
    note.write_text(text)
    assert jsonnote.read(note) == {}


def test_a_note_that_cannot_be_placed_keeps_what_was_there_and_leaves_nothing(tmp_path: Path) -> None:
    blocked = tmp_path / "note.json"
    (blocked / "inside").mkdir(parents=True)  # a folder where the note would go: the rename fails
    assert not jsonnote.write(blocked, {"kept": False})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["note.json"]
    assert [p.name for p in blocked.iterdir()] == ["inside"]
    file_parent = tmp_path / "plain"
    file_parent.write_text("x")
    assert not jsonnote.write(file_parent / "note.json", {"a": 1})  # its folder cannot be made
    assert file_parent.read_text() == "x"


def test_a_note_that_cannot_be_serialised_keeps_the_old_note_and_leaves_nothing(tmp_path: Path) -> None:
    note = tmp_path / "note.json"
    assert jsonnote.write(note, {"kept": True})
    with pytest.raises(TypeError):
        jsonnote.write(note, {"bad": object()})
    assert jsonnote.read(note) == {"kept": True}
    assert [p.name for p in tmp_path.iterdir()] == ["note.json"]  # no half-written temporary file
