"""Each agent command imports only what it needs: every workspace pod execs the agent for `init` and for `serve`, and
start-up time is mostly imports. `version` and `init` must not load gRPC, protobuf, the Kubernetes client (lightkube,
pydantic) or the HTTP clients; `serve` loads gRPC and protobuf, and in kube auth mode only the agent's own stdlib
client of the API server (never lightkube, pydantic, pko's models or an HTTP client library). Checked on the modules
a fresh interpreter holds after running the command line, not on time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from dulwich import porcelain

from pko.agent import servecmd
from pko.cli import agent as cli

GRPC = ("grpc", "google.protobuf", "pko.protocol", "pko.agent.grpcserver", "pko.agent.service")
KUBE = ("lightkube", "pydantic", "pko.kube", "pko.api", "pko.agent.auth", "pko.agent.apiserver")
HTTP = ("httpx", "httpx2", "jwt", "cryptography", "pko.sources.flux", "pko.sources.githubapp")
SSH = ("paramiko", "nacl", "bcrypt", "pko.sources.ssh")  # only for a repository over SSH

RUN = """
import json, runpy, sys
out, sys.argv = sys.argv[1], ["agent", *sys.argv[2:]]
try:
    runpy.run_module("pko.cli.agent", run_name="__main__")
except SystemExit as exit:
    code = exit.code
else:
    code = 0
with open(out, "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""

IMPORT = """
import json, sys
import pko.agent.servecmd
print(json.dumps(sorted(sys.modules)))
"""


def _loaded(modules: list[str], packages: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in packages)]


def run_agent(tmp_path: Path, *args: str, code: int = 0) -> list[str]:
    """The modules loaded once ``agent <args>`` has run to its end, which returned `code`."""
    out = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", RUN, str(out), *args], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["code"] == code, done.stderr
    modules: list[str] = result["modules"]
    return modules


def test_version_imports_no_command(tmp_path: Path) -> None:
    modules = run_agent(tmp_path, "version")
    assert _loaded(modules, (*GRPC, *KUBE, *HTTP, *SSH, "asyncio", "pko.agent.initcmd", "pko.agent.servecmd")) == []


@pytest.mark.parametrize("source", ["git", "project"])
def test_init_imports_no_grpc_kube_or_http_client(tmp_path: Path, source: str) -> None:
    if source == "git":
        repo = tmp_path / "repo"
        porcelain.init(str(repo))
        (repo / "Pulumi.yaml").write_text("name: p\nruntime: yaml\n")
        porcelain.add(str(repo), [str(repo / "Pulumi.yaml")])
        commit = porcelain.commit(str(repo), message=b"program", author=b"t <t@localhost>",
                                  committer=b"t <t@localhost>").decode()
        args = ["--git-url", repo.as_uri(), "--git-revision", commit]
    else:
        args = ["--project-name", "p", "--project-runtime", "yaml"]
    target = tmp_path / "target"
    modules = run_agent(tmp_path, "init", "-t", str(target), *args)
    assert (target / "Pulumi.yaml").is_file()  # the command really ran
    assert "pko.agent.initcmd" in modules
    assert _loaded(modules, (*GRPC, *KUBE, *HTTP, *SSH, "pko.agent.servecmd")) == []


def test_serve_loads_grpc_while_it_starts_and_the_kube_client_only_for_kube_auth() -> None:
    """The serve command's module (and the workspace it opens first) loads neither gRPC nor protobuf: `serve` loads
    them in a thread while `pulumi version` runs."""
    done = subprocess.run([sys.executable, "-c", IMPORT], capture_output=True, text=True, timeout=60, check=True)
    modules = json.loads(done.stdout)
    assert "pko.agent.workspace" in modules
    assert _loaded(modules, (*GRPC, *KUBE, *HTTP)) == []


def test_a_failing_serve_reports_without_loading_inits_git_client(tmp_path: Path) -> None:
    """`serve` that fails (here: its workspace is missing) writes the termination message through a module of its
    own: neither `init`'s command module nor its git client (dulwich) is loaded on the serve path."""
    modules = run_agent(tmp_path, "serve", "--workspace", str(tmp_path / "missing"), "--port", "0", code=1)
    assert _loaded(modules, ("pko.agent.initcmd", "pko.sources", "dulwich", *HTTP, *SSH)) == []
    assert "pko.agent.servecmd" in modules  # the command ran
    assert "pko.agent.termination" in modules  # and reported


SERVE_KUBE = """
import json, sys
import pko.agent.servecmd, pko.agent.auth, pko.agent.apiserver, pko.agent.service, pko.agent.grpcserver
print(json.dumps(sorted(sys.modules)))
"""


def test_serve_in_kube_auth_mode_loads_no_kubernetes_client_library() -> None:
    """Every module `agent serve --auth-mode kube` runs: the TokenReview and SubjectAccessReview go through
    pko.agent.apiserver (the standard library), not lightkube with pko's models (most of the start-up's CPU)."""
    done = subprocess.run([sys.executable, "-c", SERVE_KUBE], capture_output=True, text=True, timeout=60,
                          check=True)
    modules = json.loads(done.stdout)
    assert "pko.agent.apiserver" in modules
    assert _loaded(modules, ("lightkube", "pydantic", "pko.kube", "pko.api", *HTTP)) == []


def test_auth_mode_default_is_servecmds() -> None:
    assert cli.AUTH_NONE == servecmd.AUTH_NONE
