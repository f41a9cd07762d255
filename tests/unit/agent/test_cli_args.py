"""Every request field reaches the Pulumi CLI, as the reference agent passes it."""

from __future__ import annotations

from pko.agent import cliargs
from pko.protocol.proto import agent_pb2

TAIL = ["--exec-kind", "auto.local", "--stack", "dev", "--non-interactive", "--event-log", "/tmp/ev"]
UA = f"--exec-agent={cliargs.USER_AGENT}"


def test_up_with_every_field() -> None:
    request = agent_pb2.UpRequest(parallel=4, message="m", expect_no_changes=True, replace=["urn:a"],
                                  target=["urn:b", "urn:c"], target_dependents=True,
                                  policy_pack=[agent_pb2.PolicyPack(name="ignored")], refresh=True,
                                  continue_on_error=True)
    assert cliargs.up_args(request, "dev", "/tmp/ev") == [
        "up", "--yes", "--skip-preview", "--suppress-progress", "--diff", UA, "--message=m", "--expect-no-changes",
        "--replace=urn:a", "--target=urn:b", "--target=urn:c", "--target-dependents", "--parallel=4", "--refresh",
        "--continue-on-error", *TAIL]


def test_up_defaults_and_debug_logging() -> None:
    assert cliargs.up_args(agent_pb2.UpRequest(), "dev", None, log_level=5) == [
        "up", "--yes", "--skip-preview", "--suppress-progress", "--diff", UA, "--logtostderr", "-v=5",
        "--exec-kind", "auto.local", "--stack", "dev", "--non-interactive"]


def test_preview_with_every_field() -> None:
    request = agent_pb2.PreviewRequest(parallel=2, message="m", expect_no_changes=True, replace=["r"], target=["t"],
                                       target_dependents=True, refresh=True)
    assert cliargs.preview_args(request, "dev", "/tmp/ev") == [
        "preview", "--diff", UA, "--message=m", "--expect-no-changes", "--replace=r", "--target=t",
        "--target-dependents", "--parallel=2", "--refresh", *TAIL]


def test_refresh_run_program_both_ways() -> None:
    on = agent_pb2.RefreshRequest(parallel=1, message="m", expect_no_changes=True, target=["t"], run_program=True)
    assert cliargs.refresh_args(on, "dev", "/tmp/ev") == [
        "refresh", "--yes", "--skip-preview", UA, "--message=m", "--expect-no-changes", "--target=t", "--parallel=1",
        "--run-program=true", *TAIL]
    off = agent_pb2.RefreshRequest(run_program=False)
    assert "--run-program=false" in cliargs.refresh_args(off, "dev")
    assert not any(a.startswith("--run-program") for a in cliargs.refresh_args(agent_pb2.RefreshRequest(), "dev"))


def test_destroy_leaves_remove_to_the_agent() -> None:
    request = agent_pb2.DestroyRequest(parallel=3, message="m", target=["t"], target_dependents=True, refresh=True,
                                       continue_on_error=True, remove=True, run_program=True)
    assert cliargs.destroy_args(request, "dev", "/tmp/ev") == [
        "destroy", "--yes", "--skip-preview", UA, "--message=m", "--target=t", "--target-dependents", "--parallel=3",
        "--refresh", "--continue-on-error", "--run-program=true", *TAIL]


def test_a_preview_only_destroy_deletes_nothing() -> None:
    """pko destroy protection: `--preview-only`, never `--yes` or `--skip-preview`."""
    request = agent_pb2.DestroyRequest(message="m", remove=True, preview_only=True)
    args = cliargs.destroy_args(request, "dev", "/tmp/ev")
    assert args == ["destroy", "--preview-only", UA, "--message=m", *TAIL]


def test_zero_parallel_is_not_passed() -> None:
    assert not any(a.startswith("--parallel") for a in cliargs.up_args(agent_pb2.UpRequest(parallel=0), "dev"))
