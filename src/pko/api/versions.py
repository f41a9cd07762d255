"""Pulumi CLI versions read as the Go operator reads them: blang/semver's ``ParseTolerant`` over SemVer 2.0.

The Workspace controller gates structured config on the CLI version the agent reports (``status.pulumiVersion``),
and the reference parses that with ``semver.ParseTolerant`` and compares with ``LT``. So, as there: surrounding
whitespace and one ``v`` prefix are dropped, leading zeros of the dot-separated parts are trimmed, a short version
is padded with ``.0`` (``3.202`` is ``3.202.0``, ``3`` is ``3.0.0``; a short one with a pre-release or build
suffix is refused), and the rest must be strict SemVer — parsed and compared by the ``semver`` package, so a
pre-release sorts before its release (``3.202.0-alpha`` < ``3.202.0``).

Pure.
"""

from __future__ import annotations

import semver

Version = semver.Version


def parse_tolerant(text: str) -> Version | None:
    """The version in `text`, or None where Go's ``semver.ParseTolerant`` returns an error."""
    parts = text.strip().removeprefix("v").split(".", 2)
    for index, part in enumerate(parts):
        if len(part) > 1:
            trimmed = part.lstrip("0")
            parts[index] = trimmed if trimmed[:1] and trimmed[0] in "0123456789" else "0" + trimmed
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            return None
        parts += ["0"] * (3 - len(parts))
    try:
        return Version.parse(".".join(parts))
    except ValueError:
        return None
