"""Preparing a fresh workspace agent for updates: Install, then per stack SelectStack, SetAllConfig, AddEnvironments.

Runs once per workspace pod (or local agent). The pure parts — turning the Workspace's stack config into agent
`ConfigItem`s and deciding whether the CLI is new enough for structured config — are separate so they can be
tested without an agent, as is :func:`shown_if_slow`, which writes a step's status only when it is worth reading.

Must never: log config values (they may be secrets).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from google.protobuf import json_format, struct_pb2

from pko.api import versions
from pko.api import workspace as ws_api
from pko.protocol.proto import agent_pb2

JSON_CONFIG_MIN_VERSION = versions.Version(3, 202, 0)

#: pko: how long an initialisation step (Install; SelectStack and config) runs before the Workspace's status says
#: so. The Go operator writes ``Ready=False/Installing`` and ``/Initializing`` before each step starts; a step over
#: sooner is not worth a status write, a watch event for every client of Workspaces, and the Stack's own write
#: that its Workspace left the pool's queue (in a fleet of YAML programs on two busy cores, installing took well
#: under a second and selecting the stack 2 to 3 s: they were two of a Workspace's six writes and one of its Stack's
#: five). A person who looks at a Workspace every few seconds would rarely have seen them.
SHOW_STEP_AFTER = 5.0

T = TypeVar("T")


async def shown_if_slow(step: Awaitable[T], show: Callable[[], Awaitable[None]], after: float = SHOW_STEP_AFTER
                        ) -> T:
    """Run `step`; if it is still running `after` seconds on, `show` it (write the status that says it runs) and
    go on waiting. The step's result or error is the caller's either way; `show` is called at most once, and only
    while the step runs (nothing the step does waits on it). Cancelled (or `show` failing), the step is cancelled
    too."""
    task = asyncio.ensure_future(step)
    try:
        done, _ = await asyncio.wait((task,), timeout=after)
        if not done:
            await show()
        return await task
    finally:
        if not task.done():
            task.cancel()


def needs_install(spec: ws_api.WorkspaceSpec) -> bool:
    """Whether the agent must run `pulumi install` before the workspace is ready: not for a workspace built from
    `projectInfo` alone (the source-free workspace the Stack controller makes to destroy a Stack whose source is
    gone, with `runProgram` off). It holds only a project file naming the runtime: there is no program to install
    for, `destroy` needs none, and installing for the runtime there fails (no `package.json`, no `go.mod`, no
    language host in the image), which stalled the destroy and stranded the Stack's resources in the Go operator
    (PKO#1299, fixed in its 2.9.1)."""
    return spec.project_info is None or any(source is not None for source in (spec.git, spec.flux, spec.local))


def uses_json_config(stacks: Sequence[ws_api.WorkspaceStack] | None) -> bool:
    """Structured values (non-string `value`, or `valueFrom.json`) need CLI >= 3.202.0 on the agent side."""
    for stack in stacks or ():
        for item in stack.config or ():
            if item.value is not None and not isinstance(item.value, str):
                return True
            if item.value_from is not None and item.value_from.json_:
                return True
    return False


def json_config_problem(stacks: Sequence[ws_api.WorkspaceStack] | None, pulumi_version: str) -> str | None:
    """The reference's message when the workspace's CLI is too old for its config; None when fine."""
    if not uses_json_config(stacks):
        return None
    version = versions.parse_tolerant(pulumi_version)
    if version is None:
        return f'Failed to parse Pulumi version "{pulumi_version}"'
    if version < JSON_CONFIG_MIN_VERSION:
        return (f"Pulumi CLI version {pulumi_version} does not support JSON configuration, "
                f"require >= v{JSON_CONFIG_MIN_VERSION}")
    return None


def config_items(item_list: Sequence[ws_api.ConfigItem] | None,
                 translate_path: Callable[[str], str] = lambda p: p) -> list[agent_pb2.ConfigItem]:
    """The agent's `ConfigItem`s for a stack's config (`translate_path` maps pod paths for the local runtime)."""
    result = []
    for item in item_list or ():
        message = agent_pb2.ConfigItem(key=item.key)
        if item.path is not None:
            message.path = item.path
        if item.secret is not None:
            message.secret = item.secret
        if item.value_from is not None:
            source = item.value_from
            if source.env is not None:
                message.value_from.env = source.env
            elif source.path is not None:
                message.value_from.path = translate_path(source.path)
            if source.json_ is not None:
                message.value_from.json = source.json_
        elif item.value is not None:
            message.value.CopyFrom(json_format.ParseDict(item.value, struct_pb2.Value()))
        result.append(message)
    return result
