"""The build context pko's image key hashes: the files `.dockerignore` lets in, as Docker decides it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pko.testing import buildcontext

IGNORE = """\
# The build context is only what the Dockerfile copies.
*
!pyproject.toml
!README.md
!src/
!tools/agent-bin/
**/__pycache__
**/*.pyc
"""


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _tree(tmp_path, {
        ".dockerignore": IGNORE,
        "pyproject.toml": "[project]\n",
        "README.md": "# pko\n",
        "Makefile": "all:\n",
        "src/pko/__init__.py": "",
        "src/pko/__pycache__/__init__.cpython-311.pyc": "bytecode",
        "src/pko/deep/mod.pyc": "bytecode",
        "tools/agent-bin/build.sh": "#!/bin/sh\n",
        "tools/helm/x.txt": "not copied",
        ".venv/lib/site.py": "",
        ".git/HEAD": "ref: refs/heads/main\n",
    })  # fmt: skip
    return tmp_path


@pytest.mark.parametrize(
    ("path", "excluded"),
    [
        ("Makefile", True),
        ("pyproject.toml", False),
        ("src", False),
        ("src/pko/cli/main.py", False),
        ("src/pko/__pycache__/x.pyc", True),
        ("src/pko/x.pyc", True),
        ("tools", True),
        ("tools/agent-bin/build.sh", False),
        ("tools/helm/build.sh", True),
        (".venv/bin/python", True),
    ],
)
def test_last_matching_rule_wins_and_parents_count(path: str, excluded: bool) -> None:
    assert buildcontext.is_excluded(path, buildcontext.parse_dockerignore(IGNORE)) is excluded


def test_globs() -> None:
    rules = buildcontext.parse_dockerignore("docs/*.md\n**/build\na?c\n[xy].txt\n!docs/keep.md\n")
    assert buildcontext.is_excluded("docs/guide.md", rules)
    assert not buildcontext.is_excluded("docs/sub/guide.md", rules)  # `*` stays within a directory
    assert not buildcontext.is_excluded("docs/keep.md", rules)
    assert buildcontext.is_excluded("build/out.o", rules)
    assert buildcontext.is_excluded("a/b/build/out.o", rules)
    assert buildcontext.is_excluded("abc", rules)
    assert not buildcontext.is_excluded("abbc", rules)
    assert buildcontext.is_excluded("x.txt", rules)
    assert not buildcontext.is_excluded("z.txt", rules)


def test_context_files(repo: Path) -> None:
    assert buildcontext.context_files(repo) == [
        "README.md",
        "pyproject.toml",
        "src/pko/__init__.py",
        "tools/agent-bin/build.sh",
    ]


def test_hash_changes_with_what_the_build_sees_only(repo: Path) -> None:
    def key() -> str:
        return buildcontext.tree_hash(repo, buildcontext.context_files(repo))

    first = key()
    (repo / "Makefile").write_text("changed\n")
    (repo / "src/pko/__pycache__/__init__.cpython-311.pyc").write_text("new bytecode")
    (repo / "tools/helm/new.txt").write_text("new")
    assert key() == first

    (repo / "src/pko/__init__.py").write_text("VERSION = 2\n")
    second = key()
    assert second != first
    (repo / "tools/agent-bin/build.sh").chmod(0o755)
    third = key()
    assert third != second
    (repo / "src/pko/new.py").write_text("")
    assert key() != third
