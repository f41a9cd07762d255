"""Put back the ``node_modules`` a workspace's last pod installed, when the project's package files are still the
ones it was installed for (pko: a workspace whose ``/share`` is a kept volume,
:class:`pko.controllers.workspace.manifests.ShareVolume`).

Why: a wake from scale-to-zero is a new pod, and a TypeScript program's pod spent about 8 of a wake's 18 to 21 s
installing what the pod before it had installed (unpacking some 14,000 files of the npm tree, running the packages'
install scripts). With a kept share, the new pod's ``fetch`` sets the last ``node_modules`` aside (a rename on the
same volume) before it clears the old source; here the agent renames it back into the new checkout when the digest
of what determined it — ``package.json``, the lockfiles, ``.npmrc``, the ``node`` binary — matches the one recorded
after the install that made it, and removes it otherwise. With the plugins on the share too
(:func:`keep_plugins`), where that install put them, nothing is installed; otherwise the CLI installs the plugins
(``pulumi install --no-dependencies``).

Why it is safe: the volume is the workspace's own claim, in its namespace, mounted only by its own pods; what a
tree holds there is what this tenant's own program installed, and a tree is put back only for the very inputs it
was installed from. Must never: put back a tree for other package files, keep a tree whose install did not
finish (the record is written only after a successful install, and a tree without one is removed), or fail an
install (any trouble here means installing as before).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)

#: The agent's record, in ``node_modules``, of the inputs the tree was installed from (npm ignores dot entries).
RECORD = ".pko-installed"
#: What decides a ``node_modules`` tree (beside the Node.js binary).
INPUTS = ("package.json", "package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml", "bun.lock",
          "bun.lockb", ".npmrc")


def inputs_digest(workdir: Path, node: str | None = None) -> str | None:
    """The digest of what decides `workdir`'s ``node_modules`` (None: not a Node.js project). `node`: the Node.js
    binary (default: the one on PATH); its path, size and modification time stand for its version, so a new image
    with another Node.js installs anew (native modules are built for one)."""
    if not (workdir / "package.json").is_file():
        return None
    digest = hashlib.sha256()
    for name in INPUTS:
        try:
            content = (workdir / name).read_bytes()
        except FileNotFoundError:
            digest.update(f"{name}: absent\0".encode())
            continue
        digest.update(f"{name}: {len(content)}\0".encode())
        digest.update(content)
    node = node if node is not None else shutil.which("node")
    if node:
        info = os.stat(node)
        digest.update(f"node: {node} {info.st_size} {info.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def restore(kept_dir: Path, workdir: Path, node: str | None = None) -> bool:
    """Rename the kept ``node_modules`` into `workdir` when it was installed from `workdir`'s inputs; remove it
    otherwise. Whether it was put back. Blocking."""
    kept = kept_dir / "node_modules"
    if kept.is_symlink() or not kept.is_dir():
        return False
    try:
        recorded = (kept / RECORD).read_text().strip()
    except OSError:
        recorded = None
    try:
        digest = inputs_digest(workdir, node)
    except OSError as err:
        log.info("not putting back the last pod's node_modules: %s", err)
        digest = None
    target = workdir / "node_modules"
    if digest is not None and recorded == digest and not target.exists() and not target.is_symlink():
        try:
            kept.rename(target)
            return True
        except OSError as err:  # another volume (a source mounted elsewhere): install as before
            log.info("not putting back the last pod's node_modules: %s", err)
    shutil.rmtree(kept, ignore_errors=True)
    return False


def record(workdir: Path, node: str | None = None) -> None:
    """Write down, in `workdir`'s ``node_modules``, the inputs it was just installed from. Blocking; never raises
    (without a record the next pod installs as before)."""
    target = workdir / "node_modules"
    try:
        digest = inputs_digest(workdir, node)
        if digest is None or target.is_symlink() or not target.is_dir():
            return
        partial = target / f"{RECORD}.tmp"
        partial.write_text(digest + "\n")
        partial.replace(target / RECORD)
    except OSError as err:
        log.info("could not record what node_modules was installed from: %s", err)


def keep_plugins(kept_dir: Path, env: Mapping[str, str]) -> Path | None:
    """Have the CLI install plugins onto the kept share: ``$PULUMI_HOME/plugins`` (``~/.pulumi/plugins``) becomes a
    link to ``<kept_dir>/plugins`` when it does not exist yet. Plugins baked into the image (an existing folder) are
    left as they are, and so is the rest of ``PULUMI_HOME`` (credentials stay off the claim). Where the link points,
    or None. Blocking; never raises."""
    home = env.get("PULUMI_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".pulumi")
    plugins = Path(home) / "plugins"
    target = kept_dir / "plugins"
    try:
        if plugins.is_symlink() and plugins.resolve() == target.resolve():
            return target
        if plugins.exists() or plugins.is_symlink():
            return None
        target.mkdir(parents=True, exist_ok=True)
        plugins.parent.mkdir(parents=True, exist_ok=True)
        plugins.symlink_to(target, target_is_directory=True)
        return target
    except OSError as err:
        log.info("plugins are not kept on the share: %s", err)
        return None


def forget(workdir: Path) -> None:
    """Remove the record before an install changes the tree (an install that fails half-way must not leave a record
    that vouches for it)."""
    try:
        (workdir / "node_modules" / RECORD).unlink(missing_ok=True)
    except OSError as err:
        log.info("could not remove the record of node_modules: %s", err)
