"""The `local` runtime's guards against what a Workspace spec may hold (found by
tests/chaos/hostile/test_fuzzed_workspaces.py): nothing lands outside the agent's directory, and what the kernel
cannot take is a StartFailed message instead of an exception out of the reconcile."""

from __future__ import annotations

from pathlib import Path

import pytest

from pko.api import workspace as ws_api
from pko.controllers.workspace import local


@pytest.mark.parametrize("revision", ["../../../escaped", "..", ".", "", "a/b", "/abs", "x" * 300, "\u00e9"])
def test_a_revision_that_is_not_a_plain_name_becomes_one_path_component(revision: str) -> None:
    name = local.revision_directory(revision)
    assert "/" not in name
    assert name not in ("", ".", "..")
    assert len(name) <= 64
    assert local.revision_directory(revision) == name  # stable: the same revision finds the same agent


def test_the_operators_own_revision_hash_is_kept() -> None:
    assert local.revision_directory("575532f58ab05b2e8e078bb64cca711e") == "575532f58ab05b2e8e078bb64cca711e"


@pytest.mark.parametrize(("mount_path", "pod_path"), [
    ("/../../../../../escaped", "/escaped"), ("/etc/../../x", "/x"), ("relative", "/relative"), ("", "/"),
    ("//share/", "/share"), ("/share", "/share"), ("/ok/mount", "/ok/mount"),
])
def test_a_mount_path_stays_under_the_mounts_directory(tmp_path: Path, mount_path: str, pod_path: str) -> None:
    mounts = tmp_path / "mounts"
    normalised, where = local.mount_directory(mounts, mount_path)
    assert normalised == pod_path
    assert where == mounts / pod_path.lstrip("/")
    assert where.resolve() == mounts.resolve() or mounts.resolve() in where.resolve().parents


@pytest.mark.parametrize(("env", "problem"), [
    ({"A=B": "1"}, "invalid environment variable name 'A=B'"),
    ({"": "1"}, "invalid environment variable name ''"),
    ({"X\0": "1"}, "invalid environment variable name 'X\\x00'"),
    ({"SECRET": "a\0hidden"}, 'environment variable "SECRET" holds a NUL byte'),
    ({"PATH": "/bin", "\u00e9t\u00e9": "ok"}, None),
])
def test_an_environment_the_kernel_refuses_is_named_without_its_values(env: dict[str, str],
                                                                        problem: str | None) -> None:
    found = local.env_problem(env)
    assert found == problem
    assert found is None or "hidden" not in found


def test_a_missing_local_directory_is_a_start_failure(tmp_path: Path) -> None:
    runtime = local.LocalRuntime(None, tmp_path)  # type: ignore[arg-type]  # _fetch of a local source reads nothing
    spec = ws_api.WorkspaceSpec.model_validate({"local": {"dir": str(tmp_path / "no" / "such")}})
    with pytest.raises(local.StartFailed, match="does not exist"):
        runtime._fetch(spec, tmp_path, {})
    spec = ws_api.WorkspaceSpec.model_validate({"local": {"dir": "x\0y"}})
    with pytest.raises(local.StartFailed, match="does not exist"):
        runtime._fetch(spec, tmp_path, {})
    assert runtime._fetch(ws_api.WorkspaceSpec.model_validate({"local": {"dir": str(tmp_path)}}),
                          tmp_path, {}) == (tmp_path, None)


def test_the_agent_is_asked_to_fetch_with_the_credentials_in_its_request_only(tmp_path: Path) -> None:
    """The fetch the `fetch` init container makes in a pod is the agent's first step: the request (credentials
    included) goes on its stdin, never into its argv or environment, which the CLI and the program inherit."""
    runtime = local.LocalRuntime(None, tmp_path)  # type: ignore[arg-type]
    spec = ws_api.WorkspaceSpec.model_validate({"git": {"url": "https://git.example/r.git", "ref": "abc"}})
    env = {"GIT_URL": "https://git.example/r.git", "GIT_REVISION": "abc", "GIT_DIR": "sub/dir",
           "GIT_PASSWORD": "hidden"}
    workspace, fetch = runtime._fetch(spec, tmp_path, env)
    assert workspace == (tmp_path / "source" / "sub" / "dir").resolve()
    assert fetch is not None
    assert fetch.source == {"target_dir": str(tmp_path / "source"), "git_url": "https://git.example/r.git",
                            "git_revision": "abc"}
    assert fetch.env["GIT_PASSWORD"] == "hidden"
    assert fetch.inside == "sub/dir"
    assert fetch.report == str(tmp_path / local.FETCH_REPORT)
    with pytest.raises(local.StartFailed, match="outside the source"):
        runtime._fetch(spec, tmp_path, {**env, "GIT_DIR": "../../elsewhere"})
    with pytest.raises(local.StartFailed, match=r"fetching the source failed: environment variable .GIT_REVISION."):
        runtime._fetch(spec, tmp_path, {**env, "GIT_REVISION": "a\0b"})
    info = ws_api.WorkspaceSpec.model_validate({"projectInfo": {"name": "p", "runtime": "yaml"}})
    workspace, fetch = runtime._fetch(info, tmp_path, {})
    assert workspace == tmp_path / "workspace"
    assert fetch is not None
    assert fetch.source == {"target_dir": str(tmp_path / "workspace"), "project_name": "p",
                            "project_runtime": "yaml"}
