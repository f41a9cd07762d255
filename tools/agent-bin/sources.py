"""The source files the agent executable is built from: the import closure of `pko agent`, and nothing else.

    python sources.py list ROOT         the files, relative to the checkout ROOT, one a line
    python sources.py hash ROOT         the agent's cache key: 12 hex digits over those files, this directory and
                                        pyproject.toml (when present)
    python sources.py copy ROOT DEST    copy those files and this directory into DEST (same relative paths, times
                                        zeroed), so a build step that takes DEST is reused while they are unchanged

With ``--target kubectl-pko`` first, the same for the standalone `kubectl pko` executable of the krew archive
(tools/kubectl-pko), whose closure is `pko.cli.ctl`'s.

Why: the agent holds no operator code (an import-linter contract), so a change to the controllers, the test bed or
the operator's command line must neither rebuild the agent in the tools cache (build.sh keys it by `hash`) nor
invalidate the image build's agent layers (the Dockerfile builds the agent from `copy`'s output only, and a layer
whose copied content is unchanged is taken from buildah's cache).

The closure is what PyInstaller's analysis follows: every ``import`` statement of every module reached, wherever it
stands (also inside functions and ``if TYPE_CHECKING:``), starting from the entry script and the packages the spec
collects whole (``collect_submodules``). Only ``pko`` modules matter; the dependencies come from the build venv.
Standard library only: it runs before anything is installed, with any Python 3.11.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shutil
import sys
from pathlib import Path
from typing import NamedTuple

HERE = "tools/agent-bin"
ENTRY = f"{HERE}/pko_agent_main.py"
SPEC = f"{HERE}/pko-agent.spec"
PACKAGE = "pko"


class Target(NamedTuple):
    """One PyInstaller build: its directory (every file of it is in the key), entry script and spec."""

    here: str
    entry: str
    spec: str


AGENT = Target(HERE, ENTRY, SPEC)
TARGETS = {"agent": AGENT,
           "kubectl-pko": Target("tools/kubectl-pko", "tools/kubectl-pko/kubectl_pko_main.py",
                                 "tools/kubectl-pko/kubectl-pko.spec")}


def _module_file(src: Path, module: str) -> Path | None:
    """The file defining `module` under `src`, or None when it is not a module there."""
    base = src.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path, module: str) -> set[str]:
    """Every module name `path` (the module `module`) imports, relative imports resolved; also ``from X import Y``
    as X.Y, which is a module when Y is a submodule."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                base = ".".join(parts[:keep])
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names if alias.name != "*")
    return found


def _collected_packages(root: Path, target: Target = AGENT) -> list[str]:
    """The packages the spec bundles whole (``collect_submodules("...")``)."""
    return re.findall(r"collect_submodules\(\s*[\"']([\w.]+)[\"']\s*\)", (root / target.spec).read_text())


def agent_files(root: Path, target: Target = AGENT) -> list[str]:
    """The ``pko`` source files the agent executable (or `target`) is built from, relative to `root`, sorted."""
    src = root / "src"
    pending: list[str] = []
    for package in _collected_packages(root, target):
        package_dir = src.joinpath(*package.split("."))
        for path in sorted(package_dir.rglob("*.py")):
            parts = path.relative_to(src).with_suffix("").parts
            pending.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    pending += sorted(name for name in _imports(root / target.entry, "__main__") if name.split(".")[0] == PACKAGE)
    seen: set[str] = set()
    files: set[Path] = set()
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        seen.add(module)
        found = _module_file(src, module)
        if found is None:
            continue
        files.add(found)
        names = module.split(".")
        pending += [".".join(names[:n]) for n in range(1, len(names))]  # the packages it lives in
        pending += [name for name in _imports(found, module) if name.split(".")[0] == PACKAGE]
    return sorted(path.relative_to(root).as_posix() for path in files)


def build_files(root: Path, target: Target = AGENT) -> list[str]:
    """What the agent's build reads from the checkout: its sources and this directory (no caches)."""
    tools = [
        path.relative_to(root).as_posix()
        for path in sorted((root / target.here).rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    ]
    return sorted({*agent_files(root, target), *tools})


def key(root: Path, target: Target = AGENT) -> str:
    """The agent's cache key: its build files' names, executable bits and contents, and pyproject.toml (the pinned
    dependencies it bundles) when present."""
    files = build_files(root, target)
    if (root / "pyproject.toml").is_file():
        files.append("pyproject.toml")
    digest = hashlib.sha256()
    for rel in sorted(files):
        path = root / rel
        kind = "x" if path.stat().st_mode & 0o111 else "f"
        digest.update(f"{rel}\0{kind}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()[:12]


def copy(root: Path, dest: Path, target: Target = AGENT) -> None:
    """Copy the build files into `dest` with normalised modes and zero times: equal sources give equal trees."""
    for rel in build_files(root, target):
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / rel, out)
        out.chmod(0o755 if (root / rel).stat().st_mode & 0o111 else 0o644)
        os.utime(out, (0, 0))
    for dirpath, _, _ in os.walk(dest):
        os.chmod(dirpath, 0o755)
        os.utime(dirpath, (0, 0))


def main(argv: list[str]) -> int:
    target = AGENT
    if argv[:1] == ["--target"] and len(argv) > 1 and argv[1] in TARGETS:
        target, argv = TARGETS[argv[1]], argv[2:]
    if len(argv) < 2 or argv[0] not in ("list", "hash", "copy") or (argv[0] == "copy") != (len(argv) == 3):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    root = Path(argv[1])
    if argv[0] == "list":
        print("\n".join(agent_files(root, target)))
    elif argv[0] == "hash":
        print(key(root, target))
    else:
        copy(root, Path(argv[2]), target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
