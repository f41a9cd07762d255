"""The Pulumi CLI arguments for each streamed operation, built from the request exactly as the reference agent does.

Every request field is honoured except policy packs (the reference ignores them too). The agent always passes
``--exec-kind auto.local`` and its user agent, ``--diff`` on ``up``/``preview``, ``--suppress-progress`` on ``up``, and
debug flags only when a log level is configured. ``destroy --remove`` is not handed to the CLI: the stack is removed
after the summary is read, as the Automation API does.

Pure: no I/O. It must never add ``--show-secrets`` to an operation (the CLI output is logged).
"""

from __future__ import annotations

from collections.abc import Iterable

import pko
from pko.protocol.proto import agent_pb2

USER_AGENT = f"pulumi-kubernetes-operator/{pko.__version__}"
EXEC_KIND = "auto.local"


def _common_tail(stack: str, event_log: str | None, log_level: int) -> list[str]:
    args = []
    if log_level > 0:
        args += ["--logtostderr", f"-v={log_level}"]
    args += ["--exec-kind", EXEC_KIND, "--stack", stack, "--non-interactive"]
    if event_log:
        args += ["--event-log", event_log]
    return args


def _repeat(flag: str, values: Iterable[str]) -> list[str]:
    return [f"{flag}={value}" for value in values]


def _parallel(request: agent_pb2.UpRequest | agent_pb2.PreviewRequest | agent_pb2.RefreshRequest
              | agent_pb2.DestroyRequest) -> list[str]:
    if request.HasField("parallel") and request.parallel > 0:
        return [f"--parallel={request.parallel}"]
    return []


def _message(request: agent_pb2.UpRequest | agent_pb2.PreviewRequest | agent_pb2.RefreshRequest
             | agent_pb2.DestroyRequest) -> list[str]:
    return [f"--message={request.message}"] if request.HasField("message") else []


def up_args(request: agent_pb2.UpRequest, stack: str, event_log: str | None = None, log_level: int = 0) -> list[str]:
    args = ["up", "--yes", "--skip-preview", "--suppress-progress", "--diff", f"--exec-agent={USER_AGENT}"]
    args += _message(request)
    if request.expect_no_changes:
        args.append("--expect-no-changes")
    args += _repeat("--replace", request.replace)
    args += _repeat("--target", request.target)
    if request.target_dependents:
        args.append("--target-dependents")
    args += _parallel(request)
    if request.refresh:
        args.append("--refresh")
    if request.continue_on_error:
        args.append("--continue-on-error")
    return args + _common_tail(stack, event_log, log_level)


def preview_args(request: agent_pb2.PreviewRequest, stack: str, event_log: str | None = None,
                 log_level: int = 0) -> list[str]:
    args = ["preview", "--diff", f"--exec-agent={USER_AGENT}"]
    args += _message(request)
    if request.expect_no_changes:
        args.append("--expect-no-changes")
    args += _repeat("--replace", request.replace)
    args += _repeat("--target", request.target)
    if request.target_dependents:
        args.append("--target-dependents")
    args += _parallel(request)
    if request.refresh:
        args.append("--refresh")
    return args + _common_tail(stack, event_log, log_level)


def refresh_args(request: agent_pb2.RefreshRequest, stack: str, event_log: str | None = None,
                 log_level: int = 0) -> list[str]:
    args = ["refresh", "--yes", "--skip-preview", f"--exec-agent={USER_AGENT}"]
    args += _message(request)
    if request.expect_no_changes:
        args.append("--expect-no-changes")
    args += _repeat("--target", request.target)
    args += _parallel(request)
    if request.HasField("run_program"):
        args.append(f"--run-program={'true' if request.run_program else 'false'}")
    return args + _common_tail(stack, event_log, log_level)


def destroy_args(request: agent_pb2.DestroyRequest, stack: str, event_log: str | None = None,
                 log_level: int = 0) -> list[str]:
    if request.preview_only:  # pko: destroy protection previews what a destroy would delete, and deletes nothing
        args = ["destroy", "--preview-only", f"--exec-agent={USER_AGENT}"]
    else:
        args = ["destroy", "--yes", "--skip-preview", f"--exec-agent={USER_AGENT}"]
    args += _message(request)
    args += _repeat("--target", request.target)
    if request.target_dependents:
        args.append("--target-dependents")
    args += _parallel(request)
    if request.refresh:
        args.append("--refresh")
    if request.continue_on_error:
        args.append("--continue-on-error")
    if request.HasField("run_program"):
        args.append(f"--run-program={'true' if request.run_program else 'false'}")
    return args + _common_tail(stack, event_log, log_level)
