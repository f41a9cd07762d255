"""Which install scripts of a dependency-cache tree a workspace pod must still run (``npm rebuild <those>``), leaving
out the two that every TypeScript Pulumi program carries and whose whole effect the pod has another way.

Why: ``npm rebuild`` cost every pod about 0.9 s on its critical path (npm's own start, a Node.js process per
script, and the Pulumi CLI that a provider package's script starts), and nearly every Pulumi program on Node.js
pays it for just these two:

- **A Pulumi provider package's plugin script** (``install: node scripts/install-pulumi-plugin.js resource <name>
  <version>``, in ``@pulumi/kubernetes``, ``@pulumi/aws`` and others): it runs ``pulumi plugin install resource
  <name> <version>`` and exits 0 whatever happens. The same package's ``package.json`` names that plugin in its
  ``pulumi`` section, which is what the CLI's own plugin step installs from (``pulumi install --no-dependencies``,
  or nothing when :mod:`pko.agent.treeplugins` finds the plugin already there) — and ``pulumi up`` installs a
  missing plugin in any case. Left out only when the script's command names exactly the plugin the section names.
- **protobufjs's ``postinstall``** (a dependency of ``@pulumi/pulumi``): at most a warning on stderr about the
  version range a parent ``package.json`` asks for; it writes nothing.

A script is recognised by its command *and* the sha256 of the file it runs, as published; anything else — another
command, another file, a ``preinstall`` beside it, a ``binding.gyp`` (npm's implicit ``node-gyp rebuild``), a file
that cannot be read, automatic plugin acquisition turned off — runs as ``npm ci`` would run it. A new published
version of either file is a digest to add here, never a script skipped unseen. The tree's files are the registry's
own (the cache checks every tarball's integrity), and the decision concerns only the pod's own project: the worst a
wrong answer could do is leave out a script of that project, never run anything."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pko.agent import treeplugins
from pko.depcache.npmtree import Package, Tree

#: The scripts ``npm rebuild`` runs for a package, in its order.
LIFECYCLE = ("preinstall", "install", "postinstall")

#: sha256 of each published ``scripts/install-pulumi-plugin.js`` seen (Pulumi's Node.js code generator writes it).
PLUGIN_SCRIPT_DIGESTS = frozenset({
    "14e37d9873d942bf2ff68d8c0bff8727ccdb968fe73a374aa05ee00aa7ac5ec2",  # @pulumi/kubernetes 4.24.1
})
#: sha256 of each published ``scripts/postinstall.js`` of protobufjs seen.
PROTOBUFJS_POSTINSTALL_DIGESTS = frozenset({
    "5af8463b97ee8e309b4a2111f9479bacdf0c180de0ca0155527679b1fc6d9e6c",  # protobufjs 7.6.6
})
_PLUGIN_COMMAND = re.compile(r"^node scripts/install-pulumi-plugin\.js resource (\S+) (\S+)$")


@dataclass(frozen=True)
class Plan:
    """The packages ``npm rebuild`` must still be given (its folder names), and those left out with why."""

    rebuild: tuple[str, ...]
    left_out: tuple[tuple[str, str], ...]  # (folder name, why)


def plan(workdir: Path, tree: Tree, env: Mapping[str, str]) -> Plan:
    """Which of the tree's packages with install scripts still need ``npm rebuild``. Blocking (a few small files)."""
    acquisition_off = treeplugins.acquisition_off(env)
    rebuild: set[str] = set()
    left_out: dict[str, str] = {}
    for package in tree.packages:
        if not package.install_script:
            continue
        why = redundant(workdir / package.path, package, acquisition_off)
        if why is None:
            rebuild.add(package.folder)
        else:
            left_out[package.folder] = why
    # npm rebuild matches by folder name: one copy that must run runs them all
    return Plan(tuple(sorted(rebuild)), tuple(sorted((f, w) for f, w in left_out.items() if f not in rebuild)))


def redundant(folder: Path, package: Package, acquisition_off: bool = False) -> str | None:
    """Why the install scripts of the package unpacked in `folder` need not run, or None when they must."""
    try:
        manifest = json.loads((folder / "package.json").read_bytes())
        if not isinstance(manifest, dict) or (folder / "binding.gyp").exists():
            return None
        scripts = manifest.get("scripts")
        lifecycle = {k: scripts[k] for k in LIFECYCLE if isinstance(scripts, dict) and k in scripts}
        if manifest.get("name") != package.name or list(lifecycle) not in (["install"], ["postinstall"]):
            return None
        ((stage, command),) = lifecycle.items()
        if stage == "install" and not acquisition_off:
            return _plugin_script(folder, manifest, command)
        if stage == "postinstall" and package.name == "protobufjs" and command == "node scripts/postinstall" \
                and _digest(folder / "scripts" / "postinstall.js") in PROTOBUFJS_POSTINSTALL_DIGESTS:
            return "protobufjs's postinstall only warns about a parent's version range"
    except (OSError, ValueError):
        return None
    return None


def _plugin_script(folder: Path, manifest: dict[str, Any], command: object) -> str | None:
    found = _PLUGIN_COMMAND.match(command) if isinstance(command, str) else None
    if found is None or _digest(folder / "scripts" / "install-pulumi-plugin.js") not in PLUGIN_SCRIPT_DIGESTS:
        return None
    name, version = found.groups()
    plugin = f"resource-{name}-{version if version.startswith('v') else 'v' + version}"
    if list(treeplugins.named([folder / "package.json"])) != [plugin]:
        return None
    return f"its script installs the plugin {plugin}, which the CLI's plugin step installs"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
