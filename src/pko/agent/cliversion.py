"""The Pulumi CLI's version, asked once per binary when the runtime names a cache file.

Why: every agent asks its CLI for its version when it opens its workspace (the operator reads it over
``PulumiVersion`` and refuses a CLI too old for JSON configuration), and that is a CLI start, about 0.25 CPU s.
The ``local`` runtime starts an agent per workspace, and again at every new revision, all of them running the
same binary: it names a file (``PKO_PULUMI_VERSION_CACHE``) where the first agent leaves the answer, keyed by the
binary's real path, device, inode, size and modification time, so a rebuilt or replaced binary is asked again. A
workspace pod runs one agent for its life and names no file; nothing changes there.

Must never: fail an agent's start. An unreadable, corrupt or unwritable file only means the CLI is asked.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

from pko.agent import jsonnote

ENV = "PKO_PULUMI_VERSION_CACHE"
#: entries kept: a machine runs a handful of CLIs at most; the oldest go first
LIMIT = 16


def identity(binary: str, env: Mapping[str, str]) -> str | None:
    """The key of the CLI `binary` runs as under `env`'s PATH, or None when it cannot be found."""
    found = shutil.which(binary, path=env.get("PATH"))
    if found is None:
        return None
    try:
        real = Path(found).resolve(strict=True)
        st = real.stat()
    except OSError:
        return None
    return f"{real}:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def _entries(cache: Path) -> dict[str, str]:
    return {str(k): v for k, v in jsonnote.read(cache).items() if isinstance(v, str) and v}


def lookup(cache: Path, key: str) -> str | None:
    """The version kept for `key`, if any."""
    return _entries(cache).get(key)


def remember(cache: Path, key: str, version: str) -> None:
    """Keep `version` for `key`: written whole to a new file and renamed over the old, so an agent reading at the
    same moment sees one file or the other, never half of one."""
    entries = _entries(cache)
    entries.pop(key, None)
    entries[key] = version
    jsonnote.write(cache, dict(list(entries.items())[-LIMIT:]))
