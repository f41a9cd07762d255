"""Which files a container build sees, and one hash over them: the cache key of an image built from a Dockerfile.

`docker build` / `buildah bud` send the context directory minus what ``.dockerignore`` excludes. pko's image is
rebuilt exactly when one of those files changes, so the key must cover the same set the build does: this module
applies ``.dockerignore`` the way Docker does (the last matching line wins, a line matches a path or any of its
parent directories, ``!`` re-includes, ``**`` spans directories) and hashes names, executable bits and contents.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class IgnoreRule:
    """One ``.dockerignore`` line: a compiled pattern, and whether it re-includes (``!``) what it matches."""

    pattern: str
    regex: re.Pattern[str]
    include: bool


def _translate(pattern: str) -> str:
    """A ``.dockerignore`` glob as an anchored regular expression over ``/``-separated relative paths."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):
                out.append("(?:.*/)?")
                i += 1
            else:
                out.append(".*")
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        elif char == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            if body[0] in "!^":
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "^" + "".join(out) + "$"


def _clean(path: str) -> str:
    parts: list[str] = []
    for part in path.strip().split("/"):
        if part in ("", "."):
            continue
        if part == ".." and parts:
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts)


def parse_dockerignore(text: str) -> list[IgnoreRule]:
    """The rules of a ``.dockerignore`` file, in order (comments and blank lines dropped)."""
    rules: list[IgnoreRule] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        include = line.startswith("!")
        pattern = _clean(line[1:] if include else line)
        if pattern:
            rules.append(IgnoreRule(pattern, re.compile(_translate(pattern)), include))
    return rules


def is_excluded(path: str, rules: Sequence[IgnoreRule]) -> bool:
    """Whether `path` (relative, ``/``-separated) stays out of the context: decided by the last rule matching it or
    one of its parent directories."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for rule in rules:
        if any(rule.regex.match(prefix) for prefix in prefixes):
            excluded = not rule.include
    return excluded


def _may_reinclude_below(directory: str, rules: Sequence[IgnoreRule]) -> bool:
    """Whether some ``!`` rule could match a path below an excluded `directory` (so the walk must go in)."""
    return any(
        rule.include and (rule.pattern.startswith(directory + "/") or rule.pattern[0] in "*?[\\")
        for rule in rules
    )


def context_files(root: Path, ignore_file: str = ".dockerignore") -> list[str]:
    """The files (and symlinks) of the build context at `root`, relative and sorted, as the build would see them."""
    ignore = root / ignore_file
    rules = parse_dockerignore(ignore.read_text()) if ignore.is_file() else []
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        kept = []
        for name in sorted(dirnames):
            rel = prefix + name
            if os.path.islink(os.path.join(dirpath, name)):
                filenames.append(name)
            elif not is_excluded(rel, rules) or _may_reinclude_below(rel, rules):
                kept.append(name)
        dirnames[:] = kept
        found.extend(prefix + name for name in filenames if not is_excluded(prefix + name, rules))
    return sorted(found)


def tree_hash(root: Path, files: Sequence[str]) -> str:
    """sha256 over the files' names, executable bits and contents (a symlink by its target)."""
    digest = hashlib.sha256()
    for rel in sorted(files):
        path = root / rel
        if path.is_symlink():
            kind, content = "l", hashlib.sha256(os.readlink(path).encode()).hexdigest()
        else:
            kind = "x" if path.stat().st_mode & 0o111 else "f"
            content = hashlib.sha256(path.read_bytes()).hexdigest()
        digest.update(f"{rel}\0{kind}\0{content}\n".encode())
    return digest.hexdigest()
