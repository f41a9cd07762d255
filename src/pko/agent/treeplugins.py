"""Whether a Node.js workspace whose ``node_modules`` came from the dependency cache's tree still needs the CLI's
plugin install (``pulumi install --no-dependencies``): not when every provider plugin its packages name is in the
plugins folder already — mounted from image volumes, or installed by a package's own install script.

Why: that install starts the CLI and the Node.js language host, which walks the whole program folder (some 14,000
files with the Kubernetes SDK) for ``package.json`` files naming a plugin, only to find nothing to do — in every pod
whose plugins are mounted. The tree's plan already names every package, so the agent reads just their
``package.json`` files and names the plugins as the host does (``pulumi-language-nodejs``: a ``pulumi`` section with
``resource: true``; its ``name``, or the package's own name in the ``@pulumi`` scope; its ``version``, or the
package's, with a ``v``).

When in doubt it installs: when the host would find more than the tree holds (a ``node_modules`` folder or a link
elsewhere in the program's folder), when Pulumi.yaml lists ``plugins`` or ``packages``, when a package is
parameterized or names no plugin the host could derive, when automatic plugin acquisition is off, or when a file
cannot be read. A plugin missed here is not lost either: ``pulumi up`` installs a plugin it needs and lacks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pko.depcache.npmtree import Tree

#: Pulumi.yaml keys whose entries `pulumi install` acts on beyond the language host's plugins.
_PROJECT_KEYS = ("plugins", "packages")


def missing(workdir: Path, project: Mapping[str, Any], tree: Tree, env: Mapping[str, str],
            plugins: Path) -> str | None:
    """Why the plugin install must still run (a plugin's folder name, or what makes this unsure); None when every
    plugin the tree's packages name is in `plugins`. Blocking (a few hundred small files)."""
    if any(project.get(key) for key in _PROJECT_KEYS):
        return "Pulumi.yaml lists plugins or packages"
    if acquisition_off(env):
        return "automatic plugin acquisition is off"
    try:
        other = _outside_the_tree(workdir)
        if other is not None:
            return other
        for folder in named(workdir / package.path / "package.json" for package in tree.packages):
            if folder is None:
                return "a package names its plugin in a way the agent does not follow"
            if not (plugins / folder).is_dir() or (plugins / f"{folder}.partial").exists():
                return folder
    except (OSError, ValueError) as err:
        return f"{type(err).__name__}: {err}"
    return None


def acquisition_off(env: Mapping[str, str]) -> bool:
    """Whether the CLI installs no plugin by itself (``PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION``, as read)."""
    return (env.get("PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION") or "").lower() in ("1", "true")


def named(manifests: Iterable[Path]) -> Iterable[str | None]:
    """The plugin folder (``resource-kubernetes-v4.24.1``) each package that provides a plugin names; None for one
    that does so in a way this does not follow (a parameterized package, or a name the host cannot derive)."""
    for manifest in manifests:
        info = json.loads(manifest.read_bytes())
        section = info.get("pulumi") if isinstance(info, dict) else None
        if not isinstance(section, dict) or section.get("resource") is not True:
            continue
        if section.get("parameterization") or section.get("extensionParameterization"):
            yield None
            continue
        name = section.get("name") or ""
        package = info.get("name")
        if not name and isinstance(package, str) and package.startswith("@pulumi/"):
            name = package.split("/", 1)[1]
        version = section.get("version") or info.get("version") or ""
        if not (isinstance(name, str) and name and isinstance(version, str) and version):
            yield None
            continue
        yield f"resource-{name}-{version if version.startswith('v') else 'v' + version}"


def _outside_the_tree(workdir: Path) -> str | None:
    """What the host's walk of the program folder would find besides the tree's ``node_modules``."""
    for folder, dirs, files in os.walk(workdir):
        here = Path(folder)
        if here == workdir:
            dirs[:] = [d for d in dirs if d not in ("node_modules", ".git")]
        for entry in (*dirs, *files):
            if entry == "node_modules":
                return f"{here / entry} is another node_modules folder"
            if (here / entry).is_symlink():
                return f"{here / entry} is a link"
    return None
