"""The --env-file reader understands what init containers and users write into /share/.env."""

from __future__ import annotations

from pathlib import Path

import pytest

from pko.agent import envfile


def test_forms() -> None:
    text = (
        "# comment\n\nA=1\nexport B=two words  # trailing comment\nC: colon\n"
        "D='single $A \\n raw'\nE=\"double\\n$A ${B}\"\nF=\"multi\nline\"\nG=\nH=\"esc \\$A\"\n"
    )
    assert envfile.parse(text) == {
        "A": "1", "B": "two words", "C": "colon", "D": "single $A \\n raw", "E": "double\n1 two words",
        "F": "multi\nline", "G": "", "H": "esc $A",
    }


def test_unterminated_quote_names_the_key_not_the_value() -> None:
    with pytest.raises(envfile.EnvFileError) as failure:
        envfile.parse('TOKEN="s3cr3t\n')
    assert "TOKEN" in str(failure.value)
    assert "s3cr3t" not in str(failure.value)


def test_missing_file_is_empty(tmp_path: Path) -> None:
    assert envfile.read(tmp_path / "absent.env") == {}
    (tmp_path / ".env").write_text("X=y\n")
    assert envfile.read(tmp_path / ".env") == {"X": "y"}
