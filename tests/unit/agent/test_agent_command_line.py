"""`pko agent` accepts the reference agent's command lines, including how the workspace pod invokes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pko.agent import initcmd, project, servecmd
from pko.cli import agent as cli


def parse(*argv: str) -> object:
    return cli.build_parser().parse_args(cli._normalize(argv))


def test_pod_command_line() -> None:
    args = parse("--", "serve", "--workspace", "/share/workspace", "--skip-install", "--env-file", "/share/.env",
                 "--auth-mode", "kube", "--kube-audience", "ws.ns", "--kube-audience", "b",
                 "--kube-workspace-namespace", "ns", "--kube-workspace-name", "ws", "--pulumi-log-level", "3")
    assert args.command == "serve"  # type: ignore[attr-defined]
    assert args.kube_audiences == ["ws.ns", "b"]  # type: ignore[attr-defined]
    assert (args.host, args.port, args.skip_install) == ("0.0.0.0", 50051, True)  # type: ignore[attr-defined]
    assert args.pulumi_log_level == 3  # type: ignore[attr-defined]


def test_root_flags_before_or_after_the_subcommand() -> None:
    before = parse("-v", "--kubeconfig", "/k", "serve", "-w", "/w")
    after = parse("serve", "-w", "/w", "--verbose", "--context", "c")
    assert (before.verbose, before.kubeconfig) == (True, "/k")  # type: ignore[attr-defined]
    assert (after.verbose, after.context) == (True, "c")  # type: ignore[attr-defined]


def test_workspace_env_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKSPACE_NAMESPACE", "ns1")
    monkeypatch.setenv("WORKSPACE_NAME", "ws1")
    args = parse("serve", "-w", "/w")
    assert (args.kube_workspace_namespace, args.kube_workspace_name) == ("ns1", "ws1")  # type: ignore[attr-defined]


def test_serve_option_validation() -> None:
    servecmd.ServeOptions(workspace="/w").validate()
    for options, message in (
        (servecmd.ServeOptions(workspace="/w", auth_mode="token"), "unsupported auth mode: token"),
        (servecmd.ServeOptions(workspace="/w", auth_mode="kube"), "--kube-audience is required"),
        (servecmd.ServeOptions(workspace="/w", auth_mode="kube", kube_audiences=["a"]),
         "--kube-workspace-namespace is required"),
        (servecmd.ServeOptions(workspace="/w", auth_mode="kube", kube_audiences=["a"], kube_workspace_namespace="n"),
         "--kube-workspace-name is required"),
    ):
        with pytest.raises(servecmd.ServeError, match=message):
            options.validate()


def test_init_needs_exactly_one_complete_source() -> None:
    initcmd.InitOptions("/t", git_url="u", git_revision="r").validate()
    initcmd.InitOptions("/t", flux_url="u", flux_digest="d").validate()
    initcmd.InitOptions("/t", project_name="p", project_runtime="yaml").validate()
    for options, message in (
        (initcmd.InitOptions("/t"), "at least one of the flags"),
        (initcmd.InitOptions("/t", git_url="u"), r"missing \[git-revision\]"),
        (initcmd.InitOptions("/t", flux_digest="d"), r"missing \[flux-url\]"),
        (initcmd.InitOptions("/t", git_url="u", git_revision="r", flux_url="f", flux_digest="d"), "none of the others"),
        (initcmd.InitOptions(""), "target-dir"),
    ):
        with pytest.raises(initcmd.InitError, match=message):
            options.validate()


def test_init_project_info_writes_pulumi_yaml(tmp_path: Path) -> None:
    assert cli.main(["init", "-t", str(tmp_path / "ws"), "--project-name", "demo", "--project-runtime", "yaml"]) == 0
    assert (tmp_path / "ws" / "Pulumi.yaml").read_text() == "name: demo\nruntime: yaml\n"


def test_init_usage_error_exits_non_zero(tmp_path: Path) -> None:
    assert cli.main(["init", "-t", str(tmp_path), "--git-url", "http://x"]) == 1


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["version"]) == 0
    assert capsys.readouterr().out.strip()


def test_prebuilt_binary_projects_skip_install() -> None:
    assert project.prebuilt_binary({"runtime": {"name": "go", "options": {"binary": "./app"}}}) == "./app"
    assert project.prebuilt_binary({"runtime": "go"}) is None
    assert project.prebuilt_binary({"runtime": {"name": "python", "options": {"toolchain": "pip"}}}) is None
    assert project.prebuilt_binary({"runtime": {"name": "go", "options": {"binary": ""}}}) is None
