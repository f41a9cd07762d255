"""The `local` workspace runtime: the agent runs as child processes of the operator instead of in a pod.

Why: on a machine with an API server but no kubelet (`pko dev`, our tests) a StatefulSet's pod never runs. This
runtime plays the kubelet's part for the one pod a Workspace has: it takes the pod template the `pod` runtime
would apply (so `podTemplate` merges, env, envFrom and configMap/secret volumes mean the same), resolves env
references against the API server, materialises configMap/secret volumes as files, and runs `pko agent serve` on a
free loopback port with kube auth (forked from the agent fork server, pko.controllers.workspace.forks: no Python
start per workspace), the agent first fetching the source as `pko agent init` would (one process, the request and
its credentials on its stdin: pko.protocol.fetchrequest) and saying on a pipe when it has fetched and when it listens
(pko.protocol.ready), and starts it again when the Workspace revision changes (a change of config values only keeps
the revision: pko.controllers.workspace.fleet). A sleeping workspace (scale-to-zero) has no process at all.
Processes stop when the Workspace is deleted or the operator exits; nothing is left running.

Whatever the spec holds, a bad value is a :class:`StartFailed` (``Ready=False`` with its message), never an
exception out of the reconcile, and nothing is written outside `root`: a revision annotation the pod template
overrides is not a path, a mount path is confined to its pod's directory as a container's root confines it,
environment variables the kernel cannot take are named and refused (found by
tests/chaos/hostile/test_fuzzed_workspaces.py).

Must never: log resolved env values or file contents (they hold secrets), or leave a child process behind (the
agents are told to exit with their operator, so even a SIGKILLed operator leaves none: pko.agent.lifeline; a
Workspace's own env cannot turn that off).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import hashlib
import logging
import os
import posixpath
import re
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pko.api import names
from pko.api import workspace as ws_api
from pko.controllers.workspace import forks, runtime
from pko.kube import client as kclient
from pko.kube import objects, resources
from pko.protocol import fetchrequest, ready
from pko.runtime import controller as ctl
from pko.runtime import manager, ports

log = logging.getLogger(__name__)

START_TIMEOUT = 60.0  # from the fetch's end (a clone takes what it takes: git's own timeouts bound it)
FETCH_REPORT = "fetch.json"  # where the agent says how its fetch went (pko.protocol.fetchrequest)
LIFELINE_ENV = "PKO_AGENT_PARENT_PID"  # read by `pko agent` (see pko.agent.lifeline)
INSTANCE_ENV = "PKO_AGENT_INSTANCE"  # inherited by everything an agent starts: finds what a dead agent left
VERSION_CACHE_ENV = "PKO_PULUMI_VERSION_CACHE"  # read by pko.agent.cliversion: one `pulumi version` per binary
VERSION_CACHE = ".pulumi-versions.json"  # under the root: no namespace's name starts with a dot
FORK_SERVER_LOG = ".agent-forkserver.log"  # under the root, as the version cache
STOP_GRACE = 30.0


class StartFailed(Exception):
    """The agent could not be started; the message is safe to show on status (no secret values)."""


def default_agent_command() -> list[str]:
    return [sys.executable, "-m", "pko", "agent"]


@dataclass
class Agent:
    """One running agent: the stand-in for a workspace pod."""

    revision: str
    directory: Path
    port: int
    process: forks.AgentProcess
    mounts: dict[str, Path] = field(default_factory=dict)
    initialized: bool = False  # the pod's `auto.pulumi.com/initialized` annotation
    watcher: asyncio.Task[None] | None = None
    fetch_seconds: float | None = None  # how long the agent's fetch took (the fetch phase metric)
    instance: str = ""  # the agent's $PKO_AGENT_INSTANCE

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    def translate(self, path: str) -> str:
        """Where a path inside the pod (e.g. a mounted ConfigMap key) is on this machine."""
        for mount in sorted(self.mounts, key=len, reverse=True):
            if path == mount or path.startswith(mount.rstrip("/") + "/"):
                return str(self.mounts[mount]) + path[len(mount.rstrip("/")):]
        return path


_PLAIN_REVISION = re.compile(r"[A-Za-z0-9_-]{1,64}")


def revision_directory(revision: str) -> str:
    """The directory name of an agent at `revision`: the revision itself when it is a plain name (the operator's
    own hashes), else a digest of it. Why: ``podTemplate.metadata.annotations`` may override the revision
    annotation with anything (``../..``, ``/``, 300 characters) and the name must stay one path component."""
    if _PLAIN_REVISION.fullmatch(revision):
        return revision
    return "r-" + hashlib.sha256(revision.encode(errors="surrogatepass")).hexdigest()[:32]


def mount_directory(mounts: Path, mount_path: str) -> tuple[str, Path]:
    """Where a volume mounted at `mount_path` in the pod goes under `mounts`: the path is normalised as a container
    runtime resolves it in the container's root (``..`` stops at ``/``), so it stays under `mounts`. Returns the
    normalised pod path too (what :meth:`Agent.translate` maps)."""
    pod_path = posixpath.normpath("/" + mount_path)
    pod_path = "/" + pod_path.lstrip("/")  # normpath keeps a leading "//"
    return pod_path, mounts / pod_path.lstrip("/")


def env_problem(env: dict[str, str]) -> str | None:
    """Why `env` cannot be a process environment (a name that is empty or holds ``=`` or a NUL byte, a value that
    holds a NUL byte), naming the variable but never showing a value; None when it can."""
    for name, value in env.items():
        if not name or "=" in name or "\0" in name:
            return f"invalid environment variable name {name!r}"
        if "\0" in value:
            return f'environment variable "{name}" holds a NUL byte'
    return None


def _decode(data: dict[str, str] | None) -> dict[str, str]:
    return {k: base64.b64decode(v).decode(errors="replace") for k, v in (data or {}).items()}


class _Resolver:
    """Reads the ConfigMaps and Secrets a pod spec refers to (each once per start)."""

    def __init__(self, client: kclient.Client, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self._cache: dict[tuple[str, str], dict[str, str] | None] = {}

    async def data(self, kind: resources.Kind, name: str) -> dict[str, str] | None:
        key = (kind.kind, name)
        if key not in self._cache:
            obj = await self.client.get_or_none(kind, name, self.namespace)
            if obj is None:
                self._cache[key] = None
            elif kind == resources.SECRET:
                self._cache[key] = _decode(obj.get("data")) | dict(obj.get("stringData") or {})
            else:
                self._cache[key] = dict(obj.get("data") or {})
        return self._cache[key]

    async def key(self, kind: resources.Kind, ref: dict[str, Any]) -> str | None:
        data = await self.data(kind, ref.get("name", ""))
        label = "secret" if kind == resources.SECRET else "configmap"
        if data is None:
            if ref.get("optional"):
                return None
            raise StartFailed(f'{label} "{ref.get("name")}" not found')
        if ref.get("key") not in data:
            if ref.get("optional"):
                return None
            raise StartFailed(f'couldn\'t find key {ref.get("key")} in {label} {self.namespace}/{ref.get("name")}')
        return data[ref["key"]]

    async def env(self, container: dict[str, Any], pod: dict[str, Any]) -> dict[str, str]:
        """The container's environment as the kubelet would compute it (envFrom first, then env)."""
        result: dict[str, str] = {}
        for source in container.get("envFrom") or []:
            prefix = source.get("prefix", "")
            for kind, ref in ((resources.CONFIG_MAP, source.get("configMapRef")),
                              (resources.SECRET, source.get("secretRef"))):
                if ref is None:
                    continue
                data = await self.data(kind, ref.get("name", ""))
                if data is None and not ref.get("optional"):
                    raise StartFailed(f'{kind.kind.lower()} "{ref.get("name")}" not found')
                result.update({prefix + k: v for k, v in (data or {}).items()})
        for item in container.get("env") or []:
            value = await self._env_value(item, pod)
            if value is not None:
                result[item["name"]] = value
        return result

    async def _env_value(self, item: dict[str, Any], pod: dict[str, Any]) -> str | None:
        if "valueFrom" not in item:
            return str(item.get("value", ""))
        source = item["valueFrom"]
        if "secretKeyRef" in source:
            return await self.key(resources.SECRET, source["secretKeyRef"])
        if "configMapKeyRef" in source:
            return await self.key(resources.CONFIG_MAP, source["configMapKeyRef"])
        if "fieldRef" in source:
            fields = {"metadata.namespace": self.namespace,
                      "spec.serviceAccountName": str(pod.get("serviceAccountName", "default"))}
            return fields.get(str(source["fieldRef"].get("fieldPath")), "")
        return None  # resourceFieldRef: there are no requests to report outside a pod

    async def materialise(self, volume: dict[str, Any], target: Path) -> None:
        """Write a configMap or secret volume's keys as files under `target` (other volumes: an empty dir)."""
        target.mkdir(parents=True, exist_ok=True)
        for kind, source in ((resources.CONFIG_MAP, volume.get("configMap")),
                             (resources.SECRET, volume.get("secret"))):
            if source is None:
                continue
            name = source.get("name") or source.get("secretName") or ""
            data = await self.data(kind, name)
            if data is None:
                if source.get("optional"):
                    return
                raise StartFailed(f'{kind.kind.lower()} "{name}" for volume "{volume.get("name")}" not found')
            items = source.get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                if item["key"] not in data:
                    continue
                path = (target / item["path"]).resolve()
                if target.resolve() not in path.parents:
                    raise StartFailed(f'volume "{volume.get("name")}" has a path outside its mount')
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(data[item["key"]])
                path.chmod(0o600)


class LocalRuntime:
    """Runs each Workspace's agent as local processes under `root/<namespace>/<name>/<revision>/` (a
    :class:`~pko.controllers.workspace.runtime.WorkspaceRuntime`)."""

    def __init__(
        self,
        client: kclient.Client,
        root: Path,
        *,
        kubeconfig: str | None = None,
        agent_command: Sequence[str] | None = None,
        on_exit: Callable[[objects.ObjectKey], None] | None = None,
        fork_agents: bool = True,
    ) -> None:
        self.client = client
        self.root = root
        self.kubeconfig = kubeconfig
        self.agent_command = list(agent_command or default_agent_command())
        #: pko's own agent fetches the source itself before it serves (one process); another (the Go reference
        #: agent, `--workspace-agent`) gets an `init` process first, as its pod's `fetch` init container would run
        self.fetch_in_agent = agent_command is None
        #: pko's own agents are forked from one process that has imported the agent (pko.cli.forkserver): a
        #: workspace's start then costs no Python start (about 0.25 CPU s); another agent is always exec'd
        self.forks = (forks.ForkServer(self._base_env(), root / FORK_SERVER_LOG)
                      if fork_agents and self.fetch_in_agent else None)
        self.on_exit = on_exit
        self.agents: dict[objects.ObjectKey, Agent] = {}
        self._locks: dict[objects.ObjectKey, asyncio.Lock] = {}

    def get(self, key: objects.ObjectKey) -> Agent | None:
        return self.agents.get(key)

    async def ensure(self, workspace: ws_api.Workspace, statefulset: dict[str, Any]) -> Agent:
        """The agent for `workspace` at the revision of `statefulset`'s pod template, started if needed."""
        key = objects.ObjectKey(workspace.metadata.namespace or "", workspace.metadata.name or "")
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            template = statefulset["spec"]["template"]
            revision = template["metadata"]["annotations"][names.ANNOTATION_REVISION_HASH]
            current = self.agents.get(key)
            if current is not None and current.revision == revision and current.alive:
                return current
            if current is not None:
                await self._stop(key)
            agent = await self._start(workspace, template, revision)
            self.agents[key] = agent
            return agent

    # --- the WorkspaceRuntime interface (pko.controllers.workspace.runtime) -----------------------------------

    async def place(self, workspace: ws_api.Workspace, statefulset: dict[str, Any]) -> runtime.Placement:
        try:
            agent = await self.ensure(workspace, statefulset)
        except StartFailed as err:
            return runtime.Pending(ctl.Result(requeue=True), runtime.WAITING_FOR_REPLICAS,
                                   f"Waiting for the workspace agent: {err}")

        async def mark() -> bool:
            agent.initialized = True
            return True

        return runtime.Placed(agent.address, agent.initialized, mark, agent.translate, agent.fetch_seconds)

    async def sleep(self, workspace: ws_api.Workspace, statefulset: dict[str, Any]) -> None:
        """A sleeping workspace has no agent process: stop it (waking starts a fresh one, as a new pod would)."""
        await self.stop(objects.ObjectKey(workspace.metadata.namespace or "", workspace.metadata.name or ""))

    async def stopped(self, key: objects.ObjectKey) -> bool:
        """:meth:`sleep` waits for the agent's processes to exit: stopped unless one was started since."""
        return key not in self.agents

    async def remove(self, key: objects.ObjectKey) -> None:
        await self.stop(key)

    def watch(self, mgr: manager.Manager, controller: ctl.Controller) -> None:
        """An agent that exits re-queues its Workspace (a kubelet would restart the pod)."""
        self.on_exit = lambda key: controller.queue.add(key)  # the queue of the controller's current run

    # --- lifecycle ---------------------------------------------------------------------------------------------

    async def stop(self, key: objects.ObjectKey) -> None:
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            await self._stop(key)
        self._locks.pop(key, None)

    async def close(self) -> None:
        for key in list(self.agents):
            await self.stop(key)
        if self.forks is not None:
            await self.forks.close()

    # --- starting ----------------------------------------------------------------------------------------------

    def _base_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env[LIFELINE_ENV] = str(os.getpid())  # the agent exits when this operator process dies
        env.setdefault(VERSION_CACHE_ENV, str(self.root / VERSION_CACHE))
        if self.kubeconfig:
            env["KUBECONFIG"] = self.kubeconfig
        return env

    async def _start(self, workspace: ws_api.Workspace, template: dict[str, Any], revision: str) -> Agent:
        namespace = workspace.metadata.namespace or ""
        name = workspace.metadata.name or ""
        directory = self.root / namespace / name / revision_directory(revision)
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        pod = template["spec"]
        resolver = _Resolver(self.client, namespace)
        init_containers = {c["name"]: c for c in pod.get("initContainers") or []}
        pulumi = next(c for c in pod["containers"] if c["name"] == "pulumi")
        env_file = directory / ".env"
        env_file.touch()

        fetch_env = await resolver.env(init_containers["fetch"], pod) if "fetch" in init_containers else {}
        workspace_dir, fetch = self._fetch(workspace.spec or ws_api.WorkspaceSpec(), directory, fetch_env)
        fetched: float | None = None
        if fetch is not None and not self.fetch_in_agent:
            fetching = time.monotonic()
            await self._init(directory, fetch)
            fetched = time.monotonic() - fetching
            if fetch.inside:  # what the checkout holds now (a link) may take the project's folder out of it
                workspace_dir = _inside(Path(fetch.source["target_dir"]), fetch.inside)
            fetch = None

        mounts: dict[str, Path] = {}
        volumes = {v["name"]: v for v in pod.get("volumes") or []}
        for mount in pulumi.get("volumeMounts") or []:
            pod_path, local = mount_directory(directory / "mounts", mount["mountPath"])
            if pod_path == "/share" or mount["name"] not in volumes:
                continue
            await resolver.materialise(volumes[mount["name"]], local)
            mounts[pod_path] = local
        env = self._base_env() | await resolver.env(pulumi, pod)
        env["PULUMI_ENV"] = str(env_file)
        env[LIFELINE_ENV] = str(os.getpid())  # the pod's env may not turn the lifeline off
        instance = env[INSTANCE_ENV] = uuid.uuid4().hex
        problem = env_problem(env)
        if problem is not None:
            raise StartFailed(problem)

        port = ports.free_port()  # below the ephemeral range; never one this process handed out a moment ago
        spec = workspace.spec or ws_api.WorkspaceSpec()
        argv = ["serve", "--workspace", str(workspace_dir), "--skip-install",
                "--env-file", str(env_file), "--auth-mode", "kube",
                "--kube-audience", f"{name}.{namespace}",
                "--kube-workspace-namespace", namespace, "--kube-workspace-name", name,
                "--host", "127.0.0.1", "--port", str(port)]
        if spec.pulumi_log_level:
            argv += ["--pulumi-log-level", str(spec.pulumi_log_level)]
        if self.kubeconfig:
            argv += ["--kubeconfig", self.kubeconfig]
        if fetch is not None:
            argv.append("--fetch-from-stdin")
        cwd = str(workspace_dir if fetch is None else directory)
        # pko's own agent says on a pipe when it has fetched and when it listens; another is looked at until it does
        said, say = os.pipe2(os.O_CLOEXEC) if self.fetch_in_agent else (-1, -1)
        if 0 <= say < 3:  # an operator started with a standard stream closed: the child's own would replace it
            say, low = fcntl.fcntl(say, fcntl.F_DUPFD_CLOEXEC, 3), say
            os.close(low)
        try:
            if say >= 0:
                argv += ["--ready-fd", str(ready.FORKED_FD if self.forks is not None else say)]
            try:
                process = await self._spawn(argv, env, cwd, directory / "agent.log", fetch,
                                            ready_fd=say if say >= 0 else None)
            finally:
                if say >= 0:
                    os.close(say)  # the agent holds its own copy: its exit ends the stream
            agent = Agent(revision, directory, port, process, mounts, fetch_seconds=fetched, instance=instance)
            try:
                if said >= 0:
                    await self._wait_ready(agent, ready.Lines(said), fetching=fetch is not None)
                else:
                    await self._wait_listening(agent, fetching=fetch is not None)
            except BaseException:
                await self._terminate(agent)
                raise
        finally:
            if said >= 0:
                os.close(said)
        agent.watcher = asyncio.create_task(self._watch(objects.ObjectKey(namespace, name), agent))
        log.info("workspace %s/%s: agent serving on %s (pid %d)", namespace, name, agent.address, process.pid)
        return agent

    async def _spawn(self, argv: list[str], env: dict[str, str], cwd: str, log_path: Path,
                     fetch: fetchrequest.FetchRequest | None, ready_fd: int | None = None) -> forks.AgentProcess:
        """`agent <argv>`, forked (:attr:`forks`) or exec'd, its output in `log_path`, the fetch request on its
        stdin, the descriptor `ready_fd` (a ready pipe's write end) passed on."""
        stdin = fetch.to_json().encode() if fetch is not None else None
        with log_path.open("ab") as log_file:
            if self.forks is not None:
                try:
                    return await self.forks.spawn(argv, env, cwd, log_file.fileno(), stdin, ready=ready_fd)
                except forks.SpawnFailed as err:  # what the spec put into cwd: no env value is in the message
                    raise StartFailed(f"could not start the agent: {err}") from None
            try:
                process = await asyncio.create_subprocess_exec(
                    *self.agent_command, *argv, cwd=cwd, env=env,
                    stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
                    stdout=log_file, stderr=asyncio.subprocess.STDOUT, start_new_session=True,
                    pass_fds=() if ready_fd is None else (ready_fd,),
                )
            except (OSError, ValueError) as err:  # what the spec put into argv or cwd: no env value in the message
                raise StartFailed(f"could not start the agent: {err}") from None
        if stdin is not None and process.stdin is not None:
            process.stdin.write(stdin)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # it exited: its exit says why
                await process.stdin.drain()
            process.stdin.close()
        return process

    def _fetch(self, spec: ws_api.WorkspaceSpec, directory: Path,
               env: dict[str, str]) -> tuple[Path, fetchrequest.FetchRequest | None]:
        """The workspace dir, and the fetch the agent makes before it serves (what the `fetch` init container
        does in a pod: `agent serve --fetch-from-stdin`, one process where `init` and `serve` were two)."""
        source = directory / "source"
        if spec.git:
            options = {"target_dir": str(source), "git_url": env.get("GIT_URL", ""),
                       "git_revision": env.get("GIT_REVISION", "")}
            workspace, inside = _inside(source, env.get("GIT_DIR", "")), env.get("GIT_DIR", "")
        elif spec.flux:
            options = {"target_dir": str(source), "flux_url": env.get("FLUX_URL", ""),
                       "flux_digest": env.get("FLUX_DIGEST", "")}
            workspace, inside = _inside(source, env.get("FLUX_DIR", "")), env.get("FLUX_DIR", "")
        elif spec.local:
            local = Path(env.get("LOCAL_DIR") or spec.local.dir or ".")
            if not local.is_dir():  # in a pod, the agent's working directory would be a dangling link
                raise StartFailed(f'the local project directory "{local}" does not exist')
            return local, None
        else:
            workspace, inside = directory / "workspace", ""
            if not spec.project_info:
                workspace.mkdir(exist_ok=True)
                return workspace, None
            options = {"target_dir": str(workspace), "project_name": spec.project_info.name,
                       "project_runtime": spec.project_info.runtime}
        fetch_env = self._base_env() | env
        problem = env_problem(fetch_env) or next(
            (f"invalid source argument {arg!r}" for arg in options.values() if "\0" in arg), None)
        if problem is not None:
            raise StartFailed(f"fetching the source failed: {problem}")
        return workspace, fetchrequest.FetchRequest(options, env, inside, str(directory / FETCH_REPORT))

    async def _init(self, directory: Path, fetch: fetchrequest.FetchRequest) -> None:
        """`agent init` of another agent (`--workspace-agent`) for `fetch`, as the `fetch` init container runs."""
        log_path = directory / "init.log"
        env = self._base_env() | fetch.env | {LIFELINE_ENV: str(os.getpid())}
        args = [f"--{flag.replace('_', '-')}" for flag in fetch.source]
        flags = [part for flag, value in zip(args, fetch.source.values(), strict=True) for part in (flag, value)]
        with log_path.open("ab") as log_file:
            process = await asyncio.create_subprocess_exec(
                *self.agent_command, "init", *flags, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file, stderr=asyncio.subprocess.STDOUT, start_new_session=True,
            )
            try:
                code = await process.wait()
            except BaseException:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                raise
        if code != 0:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or [""]
            raise StartFailed(f"fetching the source failed (exit {code}): {tail[0][:300]}")

    async def _wait_listening(self, agent: Agent, fetching: bool = False) -> None:
        """Until the agent listens: first, while `fetching`, until its fetch is over (it reports how it went, and
        how long it took: the fetch phase), then for at most :data:`START_TIMEOUT`."""
        loop = asyncio.get_running_loop()
        report = agent.directory / FETCH_REPORT
        deadline = None if fetching else loop.time() + START_TIMEOUT
        while deadline is None or loop.time() < deadline:
            outcome = fetchrequest.read_report(report) if fetching else fetchrequest.Outcome()
            if deadline is None and outcome.done:
                deadline = loop.time() + START_TIMEOUT
                agent.fetch_seconds = outcome.seconds
            if not agent.alive:
                raise self._exited(agent, fetching)
            if outcome.done or not fetching:
                with contextlib.suppress(OSError):
                    _, writer = await asyncio.open_connection("127.0.0.1", agent.port)
                    writer.close()
                    return
            await asyncio.sleep(0.1)
        raise StartFailed(f"the agent did not listen on {agent.address} within {START_TIMEOUT:.0f}s")

    async def _wait_ready(self, agent: Agent, lines: ready.Lines, fetching: bool) -> None:
        """Until the agent says on its ready pipe that it listens: first, while `fetching`, until it says its fetch
        is over (the fetch phase: as long as it takes), then for at most :data:`START_TIMEOUT`."""
        loop = asyncio.get_running_loop()
        deadline = None if fetching else loop.time() + START_TIMEOUT
        # its exit too, not only the stream's end: a copy of the pipe's write end left open anywhere would otherwise
        # hold a start that failed (and its Workspace's lock and slot) for as long as the fetch had no deadline
        exited = asyncio.ensure_future(agent.process.wait())
        try:
            while True:
                heard = asyncio.ensure_future(lines.next())
                try:
                    await asyncio.wait((heard, exited), timeout=None if deadline is None else deadline - loop.time(),
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not heard.done():
                        heard.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await heard
                line = heard.result() if heard.done() and not heard.cancelled() else None
                if line is None and not exited.done():
                    raise StartFailed(f"the agent did not listen on {agent.address} within {START_TIMEOUT:.0f}s")
                if line == ready.FETCHED:
                    agent.fetch_seconds = fetchrequest.read_report(agent.directory / FETCH_REPORT).seconds
                    deadline = loop.time() + START_TIMEOUT
                elif line == ready.LISTENING:
                    return
                elif not line:  # it exited (or is exiting) before it listened: its exit says why
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(STOP_GRACE):
                            await asyncio.shield(exited)
                    raise self._exited(agent, fetching)
        finally:
            if not exited.done():
                exited.cancel()

    @staticmethod
    def _exited(agent: Agent, fetching: bool) -> StartFailed:
        """Why the agent exited before it listened: its fetch's error if the fetch failed, else its last log line."""
        code = agent.process.returncode
        outcome = fetchrequest.read_report(agent.directory / FETCH_REPORT) if fetching else fetchrequest.Outcome()
        if outcome.error is not None:
            return StartFailed(f"fetching the source failed (exit {code}): {outcome.error[:300]}")
        tail = (agent.directory / "agent.log").read_text(errors="replace").strip().splitlines()[-1:] or [""]
        return StartFailed(f"the agent exited with {code}: {tail[0][:300]}")

    async def _watch(self, key: objects.ObjectKey, agent: Agent) -> None:
        await agent.process.wait()
        await asyncio.to_thread(kill_leftovers, agent.instance)
        if self.agents.get(key) is agent and self.on_exit is not None:
            log.warning("workspace %s: agent exited with %s", key, agent.process.returncode)
            self.on_exit(key)

    # --- stopping ----------------------------------------------------------------------------------------------

    async def _stop(self, key: objects.ObjectKey) -> None:
        agent = self.agents.pop(key, None)
        if agent is None:
            return
        await self._terminate(agent)
        # moved out of the way at once (a wake at the same revision makes the same directory), then removed in a
        # thread: on a disk busy with a fleet's CLIs an unlink can wait for the journal (a stop's few files held the
        # event loop some milliseconds in a 200-Stack fleet)
        gone = agent.directory.with_name(f"{agent.directory.name}.stopped-{uuid.uuid4().hex[:8]}")
        try:
            agent.directory.rename(gone)
        except OSError:
            gone = agent.directory
        await asyncio.to_thread(shutil.rmtree, gone, ignore_errors=True)

    async def _terminate(self, agent: Agent) -> None:
        if agent.watcher is not None:
            agent.watcher.cancel()
        # an agent that runs nothing (one put to sleep is idle) has no CLI that could outlive it: no look through
        # /proc for leftovers then, a millisecond or two of CPU a stop with a fleet's processes on the machine
        look = not agent.alive or has_children(agent.process.pid)
        if agent.alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(agent.process.pid, signal.SIGTERM)
            # asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancellation that arrives as the
            # process exits (the agent ends on its own SIGTERM just as the shutdown cancels this worker), and the
            # worker then waited on its queue for ever, holding up the shutdown
            try:
                async with asyncio.timeout(STOP_GRACE):
                    await agent.process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(agent.process.pid, signal.SIGKILL)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(STOP_GRACE):
                        await agent.process.wait()
        if not look:
            return
        # bounded: a process the kernel holds (reading its /proc entry can block) never holds up a shutdown
        try:
            async with asyncio.timeout(STOP_GRACE):
                await asyncio.to_thread(kill_leftovers, agent.instance)
        except TimeoutError:
            log.warning("gave up looking for processes agent %s left behind after %.0fs", agent.address, STOP_GRACE)


def has_children(pid: int) -> bool:
    """Whether any thread of process `pid` has a child now (Linux: ``/proc/<pid>/task/<tid>/children``); True when it
    cannot be told (no such files, or no such process: what it left cannot be known)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    told = False
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as children:
                if children.read().strip():
                    return True
            told = True
        except FileNotFoundError:
            continue  # the thread ended meanwhile (or the kernel has no such file: then nothing is told)
        except OSError:
            return True
    return not told


def kill_leftovers(instance: str) -> list[int]:
    """SIGKILL what an agent that is gone left running: processes carrying its `$PKO_AGENT_INSTANCE` (Linux).

    Why: a SIGKILLed agent's Pulumi CLI dies of SIGPIPE on its stdout, and the CLI's language host then waits
    forever for an engine that is gone (found by tests/chaos/test_agent_kill.py). Nothing of a dead agent can do
    useful work any more; the stack lock a dead CLI left is released by the next agent (pko.agent.stalelocks)."""
    if not instance:
        return []
    needle = f"{INSTANCE_ENV}={instance}".encode()
    killed = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            found = needle in (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    if killed:
        log.warning("killed %d process(es) a stopped agent left behind", len(killed))
    return killed


def _inside(root: Path, sub: str) -> Path:
    path = (root / sub).resolve() if sub else root
    if path != root.resolve() and root.resolve() not in path.parents:
        raise StartFailed(f'the project directory "{sub}" is outside the source')
    return path



