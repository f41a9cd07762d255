"""Provider plugins from read-only mounts — an `image` volume, or any volume — put where the Pulumi CLI finds them.

Why: every workspace pod starts with an empty plugins folder, so each one downloads and unpacks every provider plugin
its program needs (tens to hundreds of MB each) — at every cold start, new commit and wake from scale-to-zero. Users
of the Go operator are told to bake plugins into custom workspace images. With Kubernetes' `image` volumes a
platform team instead publishes each plugin (or a set of them) as an OCI image, and a Stack mounts it read-only under
:data:`DEFAULT_ROOT` through its ``workspaceTemplate``: the node's container runtime pulls it once, by digest, and
every later pod on the node mounts it at once, without a byte downloaded or a file written.

The CLI looks for a plugin only in ``$PULUMI_HOME/plugins/<kind>-<name>-v<version>`` (a real folder: it skips
links when it lists the folder), and that folder's parents must stay writable for the CLI's locks and its other
plugins — a volume mounted at that place would make its parents root's. So the agent, before anything runs, gives
each mounted plugin folder a folder of that name in the plugins folder holding a link to each of its entries. The
CLI then finds the plugin installed (no download, no ``.partial`` marker), and runs the binary through the link.

Why it is safe: the mounts are the Stack's own ``workspaceTemplate``'s, in its own pod; nothing is written to them
(read-only), and nothing is linked over a plugin already in the plugins folder. A folder it made carries
:data:`MARKER`; one whose links lead nowhere (the volume gone from a later pod, while the plugins folder is kept on
the workspace's share) is removed, so the CLI installs that plugin as before instead of running a dangling link.
Never raises: trouble here means the CLI installs the plugin as it would have anyway.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from pko.agent import yamlinstall

log = logging.getLogger(__name__)

#: Where a workspace's plugin volumes are mounted, unless ``PKO_PLUGIN_MOUNTS`` names another folder. A folder here
#: named like a plugin is one; any other folder here is searched one level down (an image of several plugins).
DEFAULT_ROOT = Path("/pulumi-plugins")
ROOT_ENV = "PKO_PLUGIN_MOUNTS"
#: The file in each plugin folder the agent made (the CLI ignores files it does not know in a plugin's folder).
MARKER = ".pko-mounted"
#: The CLI's name for a plugin's folder: kind, name, and a semantic version.
_FOLDER = re.compile(r"(?:resource|analyzer|language|converter|tool)-[A-Za-z0-9][A-Za-z0-9._-]*"
                     r"-v\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]+)?")


def is_plugin_folder(name: str) -> bool:
    """Whether `name` is the CLI's name for a plugin's folder (``resource-random-v4.19.1``)."""
    return _FOLDER.fullmatch(name) is not None


def mounted(root: Path) -> dict[str, Path]:
    """The plugin folders under `root` (itself, or one level down), by folder name; the first of a name wins."""
    found: dict[str, Path] = {}
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return found
    for entry in entries:
        if not entry.is_dir():
            continue
        if is_plugin_folder(entry.name):
            found.setdefault(entry.name, entry)
            continue
        try:
            inner = sorted(entry.iterdir())
        except OSError:
            continue
        for folder in inner:
            if folder.is_dir() and is_plugin_folder(folder.name):
                found.setdefault(folder.name, folder)
    return found


def _dangling(folder: Path) -> bool:
    """A folder the agent made whose links no longer all lead somewhere."""
    try:
        return any(entry.is_symlink() and not entry.exists() for entry in folder.iterdir())
    except OSError:
        return True


def _forget_dangling(plugins: Path) -> None:
    try:
        folders = [f for f in plugins.iterdir() if f.is_dir() and not f.is_symlink() and (f / MARKER).is_file()]
    except OSError:
        return
    for folder in folders:
        if _dangling(folder):
            log.info("plugin %s: its mounted folder is gone; the CLI installs it as before", folder.name)
            shutil.rmtree(folder, ignore_errors=True)


def _link(source: Path, target: Path) -> None:
    """Make `target` a folder of links to `source`'s entries, whole or not at all (built aside, then renamed)."""
    staging = target.with_name(f".{target.name}.pko-linking-{os.getpid()}")  # agents may share a plugins folder
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        for entry in sorted(source.iterdir()):
            (staging / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
        (staging / MARKER).write_text(f"{source}\n")
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def link(env: Mapping[str, str]) -> list[str]:
    """Give every mounted plugin folder its place in the CLI's plugins folder (see the module's docstring); the
    plugin folders linked now or before. Blocking; never raises: a folder it cannot read means the CLI installs."""
    try:
        return _link_mounted(env)
    except OSError as err:
        log.info("plugins from mounted volumes are not used: %s", err)
        return []


def _link_mounted(env: Mapping[str, str]) -> list[str]:
    root = Path(env.get(ROOT_ENV) or DEFAULT_ROOT)
    plugins = yamlinstall.plugins_dir(env)
    try:
        if plugins.is_dir():
            _forget_dangling(plugins)
        sources = mounted(root)
        if not sources:
            return []
        plugins.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        log.info("plugins from %s are not used: %s", root, err)
        return []
    linked = []
    for name, source in sources.items():
        target = plugins / name
        try:
            if target.exists() or target.is_symlink():
                if (target / MARKER).is_file():
                    linked.append(name)
                else:
                    log.info("plugin %s: already in %s; %s is not used", name, plugins, source)
                continue
            _link(source, target)
            linked.append(name)
        except OSError as err:
            if (target / MARKER).is_file():  # another agent on the same plugins folder linked it first
                linked.append(name)
            else:
                log.info("plugin %s from %s is not used: %s", name, source, err)
    if linked:
        log.info("plugins from mounted volumes: %s", ", ".join(linked))
    return linked
