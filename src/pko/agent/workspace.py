"""The agent's Pulumi workspace: one project directory, its environment, and the CLI commands the agent runs there.

This plays the part of the Go Automation API's ``LocalWorkspace`` in the reference agent, issuing the same CLI
commands (``stack select``/``stack init``/``stack ls``/``config set-all``/``config env add``/``install``/``whoami``/
``stack output``/``stack history``/``stack rm``) on :class:`~pko.agent.pulumicmd.PulumiCLI`, so nothing blocks the
event loop and every command can be interrupted.

`pko.agent.results` (and with it protobuf) is imported by the methods that build protocol messages, not at load:
``agent serve`` opens the workspace (running ``pulumi version``) while gRPC and protobuf load beside it.

It must never log config values, outputs or history (commands that may print secrets run with ``log_output=False``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pko.agent import cliversion, envfile, pluginmounts, yamlinstall
from pko.agent.project import prebuilt_binary, read_project
from pko.agent.pulumicmd import CommandError, CommandResult, PulumiCLI

if TYPE_CHECKING:
    from pko.agent.config import ConfigPlan
    from pko.agent.nodemodules import Offer
    from pko.depcache.npmtree import Tree
    from pko.protocol.proto import agent_pb2

log = logging.getLogger(__name__)

_STACK_404 = re.compile(r"no stack named.*found")
_NO_STACK = re.compile(r"no stack selected|no stack named.*found")
_CREATED = re.compile(r"Created stack '")
# As the Automation API sets it: the CLI only accepts the hidden `--event-log` flag with debug commands enabled.
AUTOMATION_ENV = {"PULUMI_DEBUG_COMMANDS": "true"}


class StackNotFoundError(Exception):
    """``stack select`` said the stack does not exist."""


def cli_version(text: str) -> str:
    """``pulumi version`` output (``v3.259.0``) as the reference reports it (``3.259.0``): text, not parsed."""
    version = text.strip().splitlines()[0].strip() if text.strip() else ""
    return version[1:] if version.startswith("v") else version


@dataclass
class Workspace:
    """A project directory plus the CLI that acts on it."""

    workdir: Path
    cli: PulumiCLI
    pulumi_version: str = ""
    #: The stack this agent last selected (or created, which selects it): the workspace is the agent's alone, so
    #: the selection cannot change behind its back and each operation need not list the stacks to find it (nor ask
    #: the CLI again). Forgotten when a command says the stack is gone from the backend.
    selected: str | None = None
    #: pko: a kept share's folder for what outlives the pod (pko.agent.keptdeps), or None
    kept_dir: Path | None = None
    #: pko: the CLI's plugins folder is a link onto that share (pko.agent.keptdeps.keep_plugins)
    plugins_kept: bool = False
    #: pko: plaintext config per stack that the next operation carries as ``--config`` (:meth:`set_all_config`)
    pending_config: dict[str, dict[str, str]] = field(default_factory=dict)
    #: pko: the dependency cache's npm tree being unpacked before the first install asked for it (:meth:`unpack_early`)
    early_tree: asyncio.Future[Offer | str] | None = field(default=None, repr=False)

    @classmethod
    async def open(cls, workdir: Path, env_file: Path | None = None, base_env: Mapping[str, str] | None = None,
                   binary: str = "pulumi") -> Workspace:
        """Open `workdir` (symlinks resolved), load `env_file` (absent is fine) and query the CLI version."""
        workspace = cls._prepare(workdir, env_file, base_env, binary)
        env = workspace.cli.env
        cache = Path(env[cliversion.ENV]) if env.get(cliversion.ENV) else None
        key = cliversion.identity(binary, env) if cache is not None else None
        known = cliversion.lookup(cache, key) if cache is not None and key is not None else None
        if known is None:
            version = await workspace.cli.run(["version"], description="failed to get the pulumi version")
            known = cli_version(version.stdout)
            if cache is not None and key is not None and known:
                cliversion.remember(cache, key, known)
        workspace.pulumi_version = known
        return workspace

    @classmethod
    def _prepare(cls, workdir: Path, env_file: Path | None, base_env: Mapping[str, str] | None,
                 binary: str) -> Workspace:
        resolved = workdir.resolve(strict=True)
        env = dict(os.environ if base_env is None else base_env)
        if env_file is not None:
            env.update(envfile.read(env_file))
        env.update(AUTOMATION_ENV)
        read_project(resolved)
        workspace = cls(resolved, PulumiCLI(resolved, env, binary))
        workspace.cli.on_failure = workspace._forget_a_missing_stack
        if env.get("PKO_KEPT_DIR"):  # pko: a kept share (pko.agent.keptdeps)
            from pko.agent import keptdeps
            workspace.kept_dir = Path(env["PKO_KEPT_DIR"])
            workspace.plugins_kept = keptdeps.keep_plugins(workspace.kept_dir, env) is not None
        pluginmounts.link(env)  # pko: plugins from the workspace's read-only volumes, before any install
        return workspace

    def _forget_a_missing_stack(self, result: CommandResult) -> None:
        """A command refused because the stack is not in the backend (removed behind this agent's back): the next
        selection asks the CLI again, and creates it when asked to."""
        if _STACK_404.search(result.stderr):
            self.selected = None

    def project(self) -> dict[str, Any]:
        return read_project(self.workdir)

    def project_info(self) -> agent_pb2.ProjectInfo:
        from pko.agent import results
        return results.project_info(self.project())

    async def whoami(self) -> dict[str, Any]:
        result = await self.cli.run(["whoami", "--json"], description="failed to get the currently logged-in user",
                                    log_output=False)
        data = json.loads(result.stdout or "{}")
        return data if isinstance(data, dict) else {}

    async def current_stack(self) -> dict[str, Any] | None:
        """The current stack's entry in ``pulumi stack ls --json``: a listing of the whole backend, which only
        ``Info`` pays for (it reports the update time and resource count only the listing gives)."""
        from pko.agent import results
        result = await self.cli.run(["stack", "ls", "--json"], description="could not list stacks", log_output=False)
        entry = results.current_stack(result.stdout)
        self.selected = str(entry["name"]) if entry is not None else None
        return entry

    async def current_stack_name(self) -> str | None:
        """The stack the CLI has selected here, if it still exists (``pulumi stack --show-name``: the workspace's
        settings and that one stack's state). Never a listing of the backend: a fleet keeps hundreds of stacks in
        one backend, so a listing costs as much as the fleet and races with every other stack's writes (a file
        seen then renamed away, an EOF), which is how one Stack's start failed for another's save."""
        try:
            result = await self.cli.run(["stack", "--show-name"], description="could not read the selected stack",
                                        log_output=False)
        except CommandError as err:
            if _NO_STACK.search(err.result.stderr):
                self.selected = None
                return None
            raise
        self.selected = result.stdout.strip() or None
        return self.selected

    async def selected_stack(self) -> str | None:
        """The selected stack's name: the one this agent selected, else what the CLI says is current."""
        if self.selected is None:
            await self.current_stack_name()
        return self.selected

    async def select_stack(self, name: str) -> None:
        try:
            await self.cli.run(["stack", "select", "--stack", name], description="failed to select stack")
        except CommandError as err:
            self.selected = None  # whatever the CLI left selected, it is asked again next time
            if _STACK_404.search(err.result.stderr):
                raise StackNotFoundError(name) from err
            raise
        self.selected = name

    async def select_or_create_stack(self, name: str, secrets_provider: str = "") -> bool:
        """Select the stack `name`, creating it (with `secrets_provider`) if it does not exist: one CLI command
        where the reference's ``select``, ``init``, ``select`` are three. True when it was created."""
        args = ["stack", "select", "--create", "--stack", name]
        if secrets_provider:
            args += ["--secrets-provider", secrets_provider]
        self.selected = None
        result = await self.cli.run(args, description="failed to select stack")
        self.selected = name
        return _CREATED.search(result.stderr + result.stdout) is not None

    async def stack_info(self, name: str) -> agent_pb2.StackSummary:
        """Select `name` and summarize it, as the Automation API's ``Stack.Info`` does."""
        from pko.agent import results
        await self.select_stack(name)
        entry = await self.current_stack()
        return results.stack_summary(entry or {})

    async def set_all_config(self, stack: str, plan: ConfigPlan) -> None:
        """Set the plan's config on `stack`. Plaintext values under verbatim keys wait for the next operation,
        which carries them (:meth:`config_flags`) and saves them to the stack file as ``config set-all`` would
        have, one CLI process fewer a workspace start (:meth:`ConfigPlan.deferred`). Anything else is set now,
        after what was waiting, so the order of the calls is kept."""
        deferred = plan.deferred()
        if deferred is not None:
            self.pending_config.setdefault(stack, {}).update(deferred)
            return
        await self.flush_config(stack)
        for args in plan.set_all_args():
            await self.cli.run([*args, "--stack", stack], description="failed to set config", log_output=False)

    async def flush_config(self, stack: str) -> None:
        """Set what waits for the next operation of `stack` now, with ``config set-all`` (keys verbatim)."""
        waiting = self.pending_config.get(stack)
        if not waiting:
            return
        args = ["config", "set-all"]
        for key, value in waiting.items():
            args += ["--plaintext", f"{key}={value}"]
        await self.cli.run([*args, "--stack", stack], description="failed to set config", log_output=False)
        self.config_saved(stack, waiting.copy())

    def config_flags(self, stack: str) -> tuple[list[str], dict[str, str]]:
        """The ``--config`` flags that carry what waits for `stack` on its next operation, and what they carry
        (hand that to :meth:`config_saved` once the operation succeeded; until then it is sent again)."""
        waiting = dict(self.pending_config.get(stack) or {})
        return [f"--config={key}={value}" for key, value in waiting.items()], waiting

    def config_saved(self, stack: str, sent: dict[str, str]) -> None:
        """`sent` is in the stack file now: forget what has not changed since."""
        waiting = self.pending_config.get(stack)
        if waiting is None:
            return
        for key, value in sent.items():
            if waiting.get(key) == value:
                del waiting[key]
        if not waiting:
            del self.pending_config[stack]

    async def add_environments(self, stack: str, environments: Sequence[str]) -> None:
        await self.cli.run(["config", "env", "add", *environments, "--yes", "--stack", stack],
                           description="unable to add environments", log_output=False)

    async def install(self) -> bool:
        """``pulumi install``, unless the project runs a prebuilt binary; False when it was skipped."""
        project = self.project()
        binary = prebuilt_binary(project)
        if binary:
            # PKO#1297 (the reference's 2.9.1): nothing to install for a program that is already built, and the
            # runtime image may have no toolchain to try with (`go`, `dotnet`, a JDK)
            log.info("skipping install: the project runs the prebuilt binary %s (runtime.options.binary)", binary)
            return False
        digest = await asyncio.to_thread(yamlinstall.inputs_digest, self.workdir, project, self.pulumi_version)
        if digest is not None:
            env = self.cli.env
            if await asyncio.to_thread(yamlinstall.installed, env, digest):
                log.info("skipping install: the plugins of this YAML program were installed into %s before",
                         yamlinstall.plugins_dir(env))
                return False
            installed = await self._install_everything()
            await asyncio.to_thread(yamlinstall.note, env, digest)
            return installed
        if self.kept_dir is None:
            return await self._install()
        from pko.agent import keptdeps
        if await asyncio.to_thread(keptdeps.restore, self.kept_dir, self.workdir):
            log.info("put back the node_modules the workspace's last pod installed: the package files are unchanged")
            if self.plugins_kept:
                # the install that made this tree (the record is written only once it succeeded) put the plugins
                # its packages name on the share too: nothing left to install (`up` still fetches any other)
                log.info("the plugins of those packages are on the share: nothing to install")
                return True
            await self.cli.run(["install", "--no-dependencies"], description="failed to install project plugins")
            return True
        await asyncio.to_thread(keptdeps.forget, self.workdir)
        installed = await self._install()
        await asyncio.to_thread(keptdeps.record, self.workdir)
        return installed

    def unpack_early(self) -> None:
        """Start unpacking the dependency cache's npm tree now, while the agent starts serving and the operator
        connects, instead of at the operator's first Install (0.65 s later on an idle 2-core node, then 1.4 s to
        unpack the Kubernetes SDK's tree): the first Install takes what it became. Only where that Install would
        ask for the tree — not for a prebuilt program or a kept share's node_modules; the offer's own checks (a
        Node.js project with a lockfile, the cache's registry, no node_modules yet) decide the rest. Nothing but
        ``node_modules`` is written: install scripts and plugins wait for the Install. On the event loop."""
        from pko.agent import nodemodules
        project = self.project()
        if self.kept_dir is not None or prebuilt_binary(project) or not nodemodules.offered(self.cli.env):
            return
        self.early_tree = asyncio.ensure_future(nodemodules.install(self.workdir, project, self.cli.env))

    async def _install(self) -> bool:
        from pko.agent import installscripts, nodemodules
        project = self.project()
        early, self.early_tree = self.early_tree, None
        used = await (early if early is not None else nodemodules.install(self.workdir, project, self.cli.env))
        if isinstance(used, str):
            if nodemodules.offered(self.cli.env):
                log.info("installing with the package manager: %s", used)
            return await self._install_everything()
        scripts = await asyncio.to_thread(installscripts.plan, self.workdir, used.tree, self.cli.env)
        for folder, why in scripts.left_out:
            log.info("not running the install scripts of %s: %s", folder, why)
        plugins = self._plugins_unless_there(project, used.tree)
        if not scripts.rebuild:
            await plugins
            return True
        # What `npm ci` would have run after unpacking, beside the plugins' install: neither waits for the other (the
        # CLI locks each plugin it installs, so a package's script installing the same one waits for it, no more).
        rebuild = self.cli.run(["rebuild", *scripts.rebuild], program="npm",
                               description="failed to run the install scripts of the project's packages")
        rebuilt, installed = await asyncio.gather(rebuild, plugins, return_exceptions=True)
        if isinstance(rebuilt, CommandError):  # npm itself may tolerate it (an optional package's script): let it say
            log.warning("installing with the package manager: %s", rebuilt)
            shutil.rmtree(self.workdir / "node_modules", ignore_errors=True)
            return await self._install_everything()
        for outcome in (rebuilt, installed):
            if isinstance(outcome, BaseException):
                raise outcome
        return True

    async def _plugins_unless_there(self, project: Mapping[str, Any], tree: Tree) -> None:
        """``pulumi install --no-dependencies`` beside a tree from the dependency cache, unless every plugin its
        packages name is in the plugins folder already (mounted, kept): see :mod:`pko.agent.treeplugins`."""
        from pko.agent import treeplugins
        folder = yamlinstall.plugins_dir(self.cli.env)
        why = await asyncio.to_thread(treeplugins.missing, self.workdir, project, tree, self.cli.env, folder)
        if why is None:
            log.info("skipping the plugin install: every plugin the packages name is in %s", folder)
            return
        await self.cli.run(["install", "--no-dependencies"], description="failed to install project plugins")

    async def _install_everything(self) -> bool:
        """``pulumi install``: the project's packages with its package manager, then its plugins."""
        await self.cli.run(["install"], description="failed to install project dependencies")
        return True

    async def outputs(self, stack: str) -> dict[str, agent_pb2.OutputValue]:
        from pko.agent import results
        masked, plain = await asyncio.gather(  # both only read the stack
            self.cli.run(["stack", "output", "--json", "--stack", stack],
                         description="could not get outputs", log_output=False),
            self.cli.run(["stack", "output", "--json", "--show-secrets", "--stack", stack],
                         description="could not get secret outputs", log_output=False))
        return results.outputs(masked.stdout, plain.stdout)

    async def plain_outputs(self, stack: str) -> str:
        """``stack output --json --show-secrets``: every output in the clear (JSON text)."""
        result = await self.cli.run(["stack", "output", "--json", "--show-secrets", "--stack", stack],
                                    description="could not get secret outputs", log_output=False)
        return result.stdout

    async def latest_history(self, stack: str) -> str:
        """``pulumi stack history --json`` of the latest operation only (a JSON list of at most one entry)."""
        history = await self.cli.run(
            ["stack", "history", "--json", "--show-secrets", "--page-size", "1", "--page", "1", "--stack", stack],
            description="failed to get stack history", log_output=False,
        )
        return history.stdout

    async def latest_summary(self, stack: str) -> agent_pb2.UpdateSummary | None:
        from pko.agent import results
        return results.update_summary(await self.latest_history(stack))

    async def remove_stack(self, stack: str) -> None:
        self.selected = None
        self.pending_config.pop(stack, None)
        await self.cli.run(["stack", "rm", "--yes", stack], description="failed to remove stack")
