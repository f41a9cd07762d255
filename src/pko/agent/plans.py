"""Update plans kept in the workspace between a reviewed preview and the approved `up` (pko addition).

Why: an approval must apply exactly what a person reviewed. `pulumi preview --save-plan FILE` writes the operations
the preview proposed; `pulumi up --plan FILE` refuses to do anything else. The agent saves the plan under its own
SHA-256 (the digest the operator shows and an approval names), so the `up` finds it by digest and checks the bytes
are still the reviewed ones. Plans live beside the workspace directory's project (`.pko-plans/`, mode 0700) and
go away with the workspace: a recreated workspace holds no plan, and the operator then asks for a new preview.

Must never: apply a plan whose bytes do not hash to the digest asked for, or put a plan's content in a log (it
holds the stack's config and planned inputs).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from pathlib import Path

import grpc

from pko.agent.errors import AgentError
from pko.protocol import status
from pko.protocol.proto import agent_pb2

# what this agent adds to the protocol, announced on SelectStack (resume-update: pko.agent.resume; keep-running:
# pko.agent.kept)
CAPABILITY = "update-plans,destroy-preview,resume-update,keep-running"
CAPABILITIES_HEADER = "pko-agent-capabilities"
PLAN_DIR = ".pko-plans"
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


class PlanStore:
    """The workspace's saved plans, by digest."""

    def __init__(self, workdir: Path) -> None:
        self.directory = workdir / PLAN_DIR

    def scratch(self) -> Path:
        """A fresh path for `--save-plan` (the digest is known only once the CLI wrote it)."""
        self.directory.mkdir(mode=0o700, exist_ok=True)
        return self.directory / f"incoming-{secrets.token_hex(8)}.json"

    def keep(self, written: Path) -> str:
        """Name the plan the CLI wrote by its SHA-256; the digest."""
        digest = hashlib.sha256(written.read_bytes()).hexdigest()
        os.replace(written, self.directory / f"{digest}.json")
        return digest

    def path_of(self, digest: str) -> Path:
        """The saved plan for `digest`, checked byte for byte; FAILED_PRECONDITION when it is gone or changed."""
        if not _DIGEST.match(digest):
            raise AgentError(grpc.StatusCode.INVALID_ARGUMENT, f"invalid plan digest {digest!r}")
        path = self.directory / f"{digest}.json"
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            message = (f"update plan {digest} is not in this workspace (it was recreated or the plan was used): a "
                       "new preview is needed")
            raise AgentError(grpc.StatusCode.FAILED_PRECONDITION, message, agent_pb2.PulumiErrorInfo(
                code=412, reason=status.REASON_PLAN_NOT_FOUND, message=message))
        return path

    def discard(self, digest: str) -> None:
        """A plan is applied once: drop it after its `up`, whatever the outcome."""
        (self.directory / f"{digest}.json").unlink(missing_ok=True)


def change_summary(event: dict[str, object]) -> dict[str, int] | None:
    """`resourceChanges` of an engine summary event (None for any other event)."""
    summary = event.get("summaryEvent")
    if not isinstance(summary, dict):
        return None
    changes = summary.get("resourceChanges") or {}
    if not isinstance(changes, dict):
        return {}
    return {str(k): int(v) for k, v in changes.items() if isinstance(v, int | float)}


def deleted_urn(event: dict[str, object]) -> str | None:
    """The URN a destroy preview's `resourcePreEvent` would delete (None for any other event)."""
    pre = event.get("resourcePreEvent")
    metadata = pre.get("metadata") if isinstance(pre, dict) else None
    if isinstance(metadata, dict) and metadata.get("op") == "delete" and isinstance(metadata.get("urn"), str):
        return str(metadata["urn"])
    return None


def destroy_digest(urns: list[str]) -> str:
    """What a destroy confirmation names: the SHA-256 of the sorted URNs that would be deleted, one per line (there
    is no plan file for a destroy; the same set of resources gives the same digest)."""
    return hashlib.sha256("\n".join(sorted(set(urns))).encode()).hexdigest()
