"""Skip ``pulumi install`` for a Pulumi YAML program whose plugins were installed before into the same plugins folder.

Why: for a YAML program ``pulumi install`` has one job, putting the plugins its resources name into
``$PULUMI_HOME/plugins`` — there are no packages to install. The ``local`` runtime gives every workspace a new
directory but one ``PULUMI_HOME``, and a fleet of Stacks of one Program ran the same install in each of them: a
CLI start and a YAML host start, about 0.2 CPU s a Stack, a tenth of what a Stack cost in all on a 2-core machine
(process accounting of ``python -m bench fleet --runtime local``), to learn that every plugin was already there. So
after a successful install the agent notes, in the plugins folder, the digest of what decided it: the project's
files (the checkout, without ``.git`` and the stacks' own ``Pulumi.<stack>.yaml`` settings; the project file without
its name and description, which name no plugin: a fleet's Programs differ by their names) and the CLI's version.
An agent whose program has a noted digest installs nothing. A workspace pod has a plugins folder of its own, so
this changes nothing there, unless its plugins are kept on a share (:mod:`pko.agent.keptdeps`), where the same
reasoning holds.

Why it is safe: the note only ever skips work that would find nothing to do. It names the plugins the folder held
when that install finished, and an agent skips only while every one of them is still there and complete (no
``.partial`` marker beside it): a plugin removed since, by hand or by ``pulumi plugin rm``, means installing as
before. And an install only fills the folder ahead of time: which plugin runs is chosen by ``up`` from the program
(an unversioned resource included) whoever put the plugins there, so a skipped install can at most leave ``up`` a
download to make, never make it run another plugin. Must never fail an install: anything unreadable or unwritable
here means installing as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pko.agent import jsonnote
from pko.agent import project as project_file

#: The note, in the plugins folder (the CLI lists only folders there, and ignores files it did not write).
NOTE = ".pko-yaml-installed.json"
#: Digests kept: the newest last; a machine runs a few programs at a few revisions at once.
LIMIT = 128
#: A checkout larger than this is not a YAML program worth the digest: it is installed as before.
MAX_FILES = 2000
MAX_BYTES = 8 << 20
_STACK_SETTINGS = re.compile(r"^Pulumi\.[^/]+\.ya?ml$")
_NAMING = frozenset({"name", "description"})


def inputs_digest(workdir: Path, project: Mapping[str, Any], cli_version: str) -> str | None:
    """The digest of what decides a YAML program's plugins (None: not YAML, no known CLI version, or too large)."""
    if project_file.runtime_name(project) != "yaml" or not cli_version:
        return None
    digest = hashlib.sha256(f"pulumi {cli_version}\0".encode())
    # the project as parsed, without what cannot name a plugin: a fleet's Programs differ by their names only
    settings = {k: v for k, v in project.items() if k not in _NAMING}
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode() + b"\0")
    files = total = 0
    try:
        for root, dirs, names in os.walk(workdir):
            dirs[:] = sorted(d for d in dirs if d != ".git")
            for name in sorted(names):
                path = Path(root, name)
                relative = path.relative_to(workdir).as_posix()
                if relative in project_file.PROJECT_FILES or _STACK_SETTINGS.match(relative) or not path.is_file():
                    continue
                size = path.stat().st_size  # before reading it: a file of gigabytes in the checkout is no reason
                files, total = files + 1, total + size  # to read it into memory (and be killed for it, each start)
                if files > MAX_FILES or total > MAX_BYTES:
                    return None
                content = path.read_bytes()
                digest.update(f"{relative}: {len(content)}\0".encode())
                digest.update(content)
    except OSError:
        return None
    return digest.hexdigest()


def plugins_dir(env: Mapping[str, str]) -> Path:
    """Where the CLI under `env` keeps its plugins."""
    home = env.get("PULUMI_HOME") or str(Path(env.get("HOME") or Path.home()) / ".pulumi")
    return Path(home) / "plugins"


def _noted(folder: Path) -> dict[str, list[str]]:
    return {str(k): [str(n) for n in v] for k, v in jsonnote.read(folder / NOTE).items() if isinstance(v, list)}


def _plugins(folder: Path) -> list[str]:
    """The plugins in `folder`: the CLI's folders (``resource-random-v4.19.1``), not its lock or marker files."""
    try:
        return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []


def installed(env: Mapping[str, str], digest: str) -> bool:
    """Whether an install of `digest` finished into this plugins folder, and every plugin the folder held then is
    still there, complete."""
    folder = plugins_dir(env)
    names = _noted(folder).get(digest)
    return names is not None and all((folder / n).is_dir() and not (folder / f"{n}.partial").exists()
                                     for n in names)


def note(env: Mapping[str, str], digest: str) -> None:
    """Note a finished install of `digest` with the plugins the folder holds now (written whole and renamed over
    the old note, so a reader at the same moment sees one note or the other)."""
    folder = plugins_dir(env)
    noted = _noted(folder)
    noted.pop(digest, None)
    kept = dict(list(noted.items())[-(LIMIT - 1):])
    kept[digest] = _plugins(folder)
    jsonnote.write(folder / NOTE, kept)
