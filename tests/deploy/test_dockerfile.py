"""The Dockerfile, checked without a Docker engine: what it copies exists (or a documented build step makes it), the
build context keeps it, the image runs `pko operator` as 65532 under tini, and the agent executable it copies runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helmchart import ROOT

import pko


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Build args declared before the first FROM, and the stages with their instructions (continuations joined)."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "a line continuation runs off the end of the Dockerfile"
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            parts = rest.split()
            base = parts[0]
            for name, value in args.items():
                base = base.replace("${" + name + "}", value)
            stages.append(Stage(base, parts[2] if len(parts) > 2 and parts[1].upper() == "AS" else str(len(stages))))
        elif not stages:
            assert keyword == "ARG", f"{keyword} before the first FROM"
            name, _, value = rest.partition("=")
            args[name] = value
        else:
            stages[-1].instructions.append((keyword, rest.strip()))
    return args, stages


def copy_parts(args: str) -> tuple[dict[str, str], list[str], str]:
    """COPY's --flags, sources and destination (shell form; the exec form is not used here)."""
    words = args.split()
    flags = dict(w[2:].partition("=")[::2] for w in words if w.startswith("--"))
    rest = [w for w in words if not w.startswith("--")]
    return flags, rest[:-1], rest[-1]


def _pattern_regex(pattern: str) -> str:
    """A .dockerignore pattern as a regex: `*` and `?` stay within a path element, `**` spans elements."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return out


def docker_ignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule: the last matching pattern wins, `!` re-includes, a matched dir covers its tree."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = _pattern_regex(pattern.removeprefix("!").strip("/"))
        if any(re.fullmatch(regex, prefix) for prefix in prefixes):
            ignored = not negate
    return ignored


DOCKERFILE = (ROOT / "Dockerfile").read_text()
BUILD_ARGS, STAGES = parse(DOCKERFILE)
FINAL = STAGES[-1]
IGNORE = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
          if line.strip() and not line.lstrip().startswith("#")]


def test_final_stage_runs_the_operator_as_nonroot_under_tini() -> None:
    assert FINAL.all("USER") == ["65532:65532"]
    assert [json.loads(e) for e in FINAL.all("ENTRYPOINT")] == [["/tini", "--"]]
    assert [json.loads(c) for c in FINAL.all("CMD")] == [["pko", "operator"]]
    env = " ".join(FINAL.all("ENV"))
    assert "PATH=/opt/pko/bin:$PATH" in env
    assert FINAL.base == STAGES[0].base, "the virtualenv is copied between stages: same Python image"


def test_base_image_python_satisfies_the_project() -> None:
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    match = re.fullmatch(r"python:(\d+)\.(\d+)-slim.*", STAGES[0].base)
    assert match, STAGES[0].base
    minimum = re.fullmatch(r">=(\d+)\.(\d+)", requires)
    assert minimum
    assert (int(match[1]), int(match[2])) >= (int(minimum[1]), int(minimum[2]))


def _stage(name: str) -> Stage:
    return next(s for s in STAGES if s.name == name)


def _copied_from(stage: Stage) -> dict[tuple[str, str], list[str]]:
    """The stage's COPY --from instructions: (destination, source stage) -> sources."""
    produced = {}
    for args in stage.all("COPY"):
        flags, sources, dest = copy_parts(args)
        if "from" in flags:
            produced[dest, flags["from"]] = sources
    return produced


def test_workspace_pod_files_are_at_the_image_root() -> None:
    """The workspace pod's `bootstrap` container runs `cp /agent /tini /share/`: both must be in the final image; so
    must the agent's tree that its smoke test unpacked beside it, which a pod mounting the image runs in place."""
    produced = _copied_from(FINAL)
    assert produced["/", "agent"] == ["/agent-root/"]  # the agent and the tree beside it, nothing else
    assert produced["/tini", "tools"] == ["/out/tini"]
    assert produced["/opt/pko", "deps"] == ["/opt/pko"]
    assert produced["/", "operator"] == ["/overlay/"]
    runs = " ".join(_stage("agent").all("RUN"))
    # The agent with the documented build script, tini from Debian's static binary.
    assert "bash tools/agent-bin/build.sh" in runs
    assert re.search(r"install -D -m 0755 \"\$agent\" /agent-root/agent", runs)
    assert "install -D -m 0755 /usr/bin/tini-static /out/tini" in " ".join(_stage("tools").all("RUN"))
    assert "/agent-root/agent version" in runs, "the build smoke-tests the agent and unpacks its tree"


def test_an_edit_under_src_redoes_only_the_layers_its_code_goes_into() -> None:
    """The layer cache keeps the expensive steps (issue #27): the dependencies are installed from the dependency list
    alone, before any source is copied; the agent is built from its own sources only (tools/agent-bin/sources.py), so
    a change to code it never imports leaves its layers cached; pko's own files come last in the image."""
    deps = _stage("deps")
    assert deps.base == "tools"
    assert _copied_from(deps) == {("/requirements/", "requirements"): ["/out/"]}
    assert not [a for a in deps.all("COPY") if "--from" not in a], "the dependency stage copies no sources"
    requirements = _stage("requirements")
    assert [copy_parts(a)[1] for a in requirements.all("COPY")] == [["pyproject.toml"]]
    assert "touch -d @0" in " ".join(requirements.all("RUN")), "the list's copy is keyed by content, not time"
    assert "-r /requirements/requirements.txt" in " ".join(deps.all("RUN"))

    operator = _stage("operator")
    assert operator.base == "deps"
    assert "--no-deps" in " ".join(operator.all("RUN"))

    agent = _stage("agent")
    assert agent.base == "deps"
    assert [copy_parts(a) for a in agent.all("COPY")] == [({"from": "agent-sources"}, ["/out/"], "/src/")]
    sources = _stage("agent-sources")
    assert "python /src/tools/agent-bin/sources.py copy /src /out" in sources.all("RUN")

    kinds = [keyword for keyword, _ in FINAL.instructions]
    assert FINAL.instructions[-1] == ("COPY", "--from=operator /overlay/ /"), "pko's own files come last"
    assert "RUN" not in kinds[1:], "nothing but the first step of the final stage runs commands"


def test_pyinstaller_pin_matches_the_agent_build() -> None:
    script = (ROOT / "tools" / "agent-bin" / "build.sh").read_text()
    wanted = re.search(r"pyinstaller==([0-9.]+)\*", script)
    assert wanted, "tools/agent-bin/build.sh no longer names its PyInstaller version"
    assert f"'pyinstaller=={wanted[1]}*'" in DOCKERFILE


@pytest.fixture(scope="module")
def agent_executable() -> Path:
    """The agent executable as the Dockerfile builds it: tools/agent-bin/build.sh (cached by source hash)."""
    done = subprocess.run(["bash", str(ROOT / "tools" / "agent-bin" / "build.sh")], capture_output=True, text=True,
                          timeout=1200, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    path = Path(done.stdout.strip().splitlines()[-1])
    assert path.is_file()
    assert os.access(path, os.X_OK)
    return path


def test_agent_executable_runs_version_without_python(agent_executable: Path, tmp_path: Path) -> None:
    """`/agent version` in a bare environment (no virtualenv, no PYTHONPATH), as in a user's Pulumi image."""
    done = subprocess.run([str(agent_executable), "version"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == pko.__version__


def test_build_context_builds_a_complete_wheel(tmp_path: Path) -> None:
    """What the Dockerfile copies (filtered by .dockerignore) is enough to build pko, with the stub README it writes:
    the wheel holds the generated gRPC code, the OpenAPI snapshot and the `pko` entry point."""
    stub = re.search(r"RUN echo '([^']*)' > README\.md", DOCKERFILE)
    assert stub, "the Dockerfile no longer writes the stub README.md that pyproject.toml names"
    context = tmp_path / "context"
    (context / "README.md").parent.mkdir(parents=True)
    (context / "README.md").write_text(stub[1] + "\n")
    for source in ("pyproject.toml", "src", "tools/agent-bin"):
        origin = ROOT / source
        files = [origin] if origin.is_file() else [p for p in origin.rglob("*") if p.is_file()]
        for path in files:
            relative = str(path.relative_to(ROOT))
            if not docker_ignored(relative, IGNORE):
                (context / relative).parent.mkdir(parents=True, exist_ok=True)
                (context / relative).write_bytes(path.read_bytes())
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path / "dist"), str(context)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "dist").glob("pko-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    for needed in ("pko/cli/main.py", "pko/cli/operator.py", "pko/protocol/proto/agent_pb2.py",
                   "pko/protocol/proto/agent_pb2_grpc.py", "pko/api/core_v1_openapi.json", "pko/py.typed"):
        assert needed in names, needed
    assert not any("__pycache__" in n for n in names)
    assert "pko = pko.cli.main:main" in entry_points
