"""Small JSON notes that several agents may read and rewrite at the same moment.

Why: the agent keeps two such notes beside what they describe (the CLI's version per binary,
:mod:`pko.agent.cliversion`; the YAML programs whose plugins are installed, :mod:`pko.agent.yamlinstall`). Each is
written whole to a new file in the same folder and renamed over the old one, so a reader sees one note or the
other, never half of one.

Must never: fail what the note only speeds up. An unwritable folder leaves the old note (or none) and no temporary
file behind; the caller carries on.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def read(path: Path) -> dict[str, Any]:
    """The note's object, or an empty one when it is missing, unreadable or not an object."""
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def write(path: Path, note: dict[str, Any]) -> bool:
    """Replace the note at `path` with `note` in one rename; False when it could not be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError:
        return False
    written = False
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(note, out)
        os.replace(temporary, path)
        written = True
    except OSError:
        return False
    finally:  # whatever stopped it (a value json cannot write is a caller's bug, and raises): no temporary left
        if not written:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
    return True
