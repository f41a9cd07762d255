"""What the agent executable is keyed by (issue #27): its own import closure only, so an edit to the controllers
rebuilds neither the tools cache's agent (tools/agent-bin/build.sh) nor the image's agent layers (the Dockerfile
builds the agent from `sources.py copy`)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _load_sources() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agent_sources", ROOT / "tools" / "agent-bin" / "sources.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sources = _load_sources()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of what the agent and the image are built from (and the README), without caches."""
    copy = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("src", "tools/agent-bin"):
        shutil.copytree(ROOT / name, copy / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md", "Dockerfile"):
        shutil.copyfile(ROOT / name, copy / name)
    return copy


def _append(path: Path, text: str = "\n# an edit\n") -> None:
    path.write_text(path.read_text() + text)


def test_the_agent_is_built_from_its_own_code_only() -> None:
    files = sources.agent_files(ROOT)
    for needed in ("src/pko/__init__.py", "src/pko/cli/agent.py", "src/pko/agent/servecmd.py",
                   "src/pko/protocol/proto/agent_pb2.py", "src/pko/sources/git.py"):
        assert needed in files, needed
    for operator_only in ("src/pko/controllers/", "src/pko/testing/", "src/pko/deploy/", "src/pko/cli/operator.py",
                          "src/pko/cli/dev.py", "src/pko/cli/main.py", "src/pko/kube/", "src/pko/runtime/"):
        assert not [f for f in files if f.startswith(operator_only)], operator_only


def test_the_agent_files_hold_every_module_the_agent_loads() -> None:
    """What a fresh interpreter loads for `pko agent` and the packages the spec bundles whole (PyInstaller's
    hidden imports) is inside the agent's files: the image builds the agent from those files alone."""
    packages = sources._collected_packages(ROOT)
    assert packages, "the spec no longer collects the agent's packages"
    program = (
        "import importlib, json, pkgutil, sys\n"
        "import pko.cli.agent\n"
        f"for name in {packages!r}:\n"
        "    package = importlib.import_module(name)\n"
        "    for info in pkgutil.walk_packages(package.__path__, name + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "print(json.dumps(sorted(m.__file__ for n, m in sys.modules.items()\n"
        "                        if n.split('.')[0] == 'pko' and getattr(m, '__file__', None))))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=env, check=True)
    loaded = {Path(f).resolve().relative_to(ROOT).as_posix() for f in json.loads(done.stdout)}
    assert loaded <= set(sources.agent_files(ROOT)), sorted(loaded - set(sources.agent_files(ROOT)))


def test_the_agent_key_ignores_operator_code_and_the_readme(checkout: Path) -> None:
    key = sources.key(checkout)
    assert sources.key(checkout) == key
    for edit in ("src/pko/controllers/stack/__init__.py", "src/pko/cli/operator.py", "src/pko/testing/images.py",
                 "README.md", "Dockerfile"):
        _append(checkout / edit)
        assert sources.key(checkout) == key, f"an edit to {edit} changed the agent's cache key"


@pytest.mark.parametrize("edit", ["src/pko/agent/servecmd.py", "src/pko/api/meta.py", "src/pko/cli/agent.py",
                                  "tools/agent-bin/launcher.c", "tools/agent-bin/pko-agent.spec", "pyproject.toml"])
def test_the_agent_key_follows_what_goes_into_the_agent(checkout: Path, edit: str) -> None:
    key = sources.key(checkout)
    _append(checkout / edit, "\n" if edit.endswith(".c") else "\n# an edit\n")
    assert sources.key(checkout) != key


def test_a_new_import_joins_the_agent(checkout: Path) -> None:
    """A module the agent starts importing is part of its files (and of its key) at once."""
    assert "src/pko/kube/__init__.py" not in sources.agent_files(checkout)
    _append(checkout / "src/pko/agent/servecmd.py", "\nimport pko.kube  # noqa\n")
    assert "src/pko/kube/__init__.py" in sources.agent_files(checkout)


def test_the_copy_is_the_same_tree_for_the_same_sources(checkout: Path, tmp_path: Path) -> None:
    """The image's agent layers are reused when the copied tree is byte-for-byte the same, times and modes included:
    a checkout that only touched its files (a branch switch, a fresh clone) must give the same tree."""

    def snapshot(dest: Path) -> list[tuple[str, int, int, bytes]]:
        return [(p.relative_to(dest).as_posix(), p.lstat().st_mtime_ns, p.lstat().st_mode,
                 p.read_bytes() if p.is_file() else b"") for p in sorted(dest.rglob("*"))]

    sources.copy(checkout, tmp_path / "one")
    for path in (checkout / "src").rglob("*.py"):
        path.touch()
    (checkout / "tools/agent-bin/build.sh").chmod(0o700)
    sources.copy(checkout, tmp_path / "two")
    assert snapshot(tmp_path / "one") == snapshot(tmp_path / "two")
    assert {rel for rel, *_ in snapshot(tmp_path / "one") if rel.endswith(".py")} >= {
        "src/pko/cli/agent.py", "tools/agent-bin/sources.py"
    }
    assert not (tmp_path / "one" / "src/pko/controllers").exists()


def test_the_kubectl_plugin_is_built_from_the_ctl_and_what_it_imports() -> None:
    """`--target kubectl-pko`: the krew archive's executable, keyed by `pko.cli.ctl`'s closure and its own build
    directory; the agent's key ignores them, and the plugin's ignores the agent."""
    target = sources.TARGETS["kubectl-pko"]
    files = sources.agent_files(ROOT, target)
    for needed in ("src/pko/cli/ctl/app.py", "src/pko/cli/ctl/view.py", "src/pko/kube/client.py"):
        assert needed in files, needed
    for elsewhere in ("src/pko/agent/", "src/pko/testing/", "src/pko/sources/", "src/pko/cli/operator.py"):
        assert not [f for f in files if f.startswith(elsewhere)], elsewhere
    assert "tools/kubectl-pko/kubectl-pko.spec" in sources.build_files(ROOT, target)
    assert not [f for f in sources.build_files(ROOT) if f.startswith("tools/kubectl-pko/")]


def test_the_kubectl_plugin_key_follows_the_ctl_not_the_agent(checkout: Path) -> None:
    shutil.copytree(ROOT / "tools" / "kubectl-pko", checkout / "tools" / "kubectl-pko",
                    ignore=shutil.ignore_patterns("__pycache__"))
    target = sources.TARGETS["kubectl-pko"]
    plugin = sources.key(checkout, target)
    _append(checkout / "src" / "pko" / "agent" / "servecmd.py")
    assert sources.key(checkout, target) == plugin
    agent = sources.key(checkout)
    _append(checkout / "src" / "pko" / "cli" / "ctl" / "view.py")
    assert sources.key(checkout, target) != plugin
    assert sources.key(checkout) == agent
