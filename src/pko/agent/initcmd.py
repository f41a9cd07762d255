"""``agent init``: put the project's sources into the workspace directory before ``serve`` starts.

Three mutually exclusive sources, as in the reference: a git repository revision (``--git-url --git-revision``, auth
and shallowness from the ``GIT_*`` variables, including a GitHub App installation token; pko adds a size cap,
``GIT_MAX_FETCH_SIZE_BYTES``), a Flux-style artifact (``--flux-url --flux-digest``, verified and safely extracted,
host override ``SOURCE_CONTROLLER_LOCALHOST``, cap ``FLUX_MAX_UNTAR_SIZE_BYTES``), or just a project file
(``--project-name --project-runtime`` writes ``Pulumi.yaml``).
A directory already holding a checkout is left as it is (a restarted init container must not fail).

A refusal is logged and, in a pod, also written to the container's termination log: the
kubelet shows it in the container's last state, where the Workspace's `Ready` message picks it up, rather than
only "back-off restarting failed container" (:mod:`pko.agent.termination`).

It must never log credentials from the environment. The Flux fetcher (urllib, ssl) and the GitHub App exchange (httpx,
PyJWT, cryptography) are imported only when their source is used: they were most of the import time of a plain git
checkout, which every workspace pod's init container pays.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from pko.sources import git

if TYPE_CHECKING:
    from pko.protocol.fetchrequest import FetchRequest

log = logging.getLogger("pko.agent.init")


class InitError(Exception):
    """The workspace could not be initialized; the message says why."""


@dataclass
class InitOptions:
    target_dir: str
    git_url: str = ""
    git_revision: str = ""
    flux_url: str = ""
    flux_digest: str = ""
    project_name: str = ""
    project_runtime: str = ""

    def validate(self) -> None:
        groups = {
            "git": (("git-url", self.git_url), ("git-revision", self.git_revision)),
            "flux": (("flux-url", self.flux_url), ("flux-digest", self.flux_digest)),
            "project": (("project-name", self.project_name), ("project-runtime", self.project_runtime)),
        }
        if not self.target_dir:
            raise InitError('required flag(s) "target-dir" not set')
        used = []
        for name, flags in groups.items():
            present = [flag for flag, value in flags if value]
            if present and len(present) != len(flags):
                missing = [flag for flag, value in flags if not value]
                raise InitError(f"if any flags in the group [{' '.join(f for f, _ in flags)}] are set they must all "
                                f"be set; missing [{' '.join(missing)}]")
            if present:
                used.append(name)
        if not used:
            raise InitError("at least one of the flags in the group [git-url flux-url project-name] is required")
        if len(used) > 1:
            raise InitError("if any flags in the group [git-url flux-url project-name] are set none of the others "
                            f"can be; {' and '.join(used)} sources were both given")


def git_auth(env: Mapping[str, str]) -> git.GitAuth:
    """Credentials from the ``GIT_*`` variables; a GitHub App is exchanged for an installation token."""
    app_id = env.get("GIT_GITHUB_APP_ID", "")
    installation = env.get("GIT_GITHUB_APP_INSTALLATION_ID", "")
    private_key = env.get("GIT_GITHUB_APP_PRIVATE_KEY", "")
    if app_id and installation and private_key:
        from pko.sources import githubapp

        try:
            token = githubapp.installation_token(app_id, installation, private_key,
                                                 api_url=env.get("GIT_GITHUB_APP_API_URL", githubapp.API_URL))
        except githubapp.GitHubAppError as err:
            raise InitError(f"unable to fetch git source: {err}") from err
        return git.GitAuth(username="x-access-token", password=token)
    return git.GitAuth.from_env(env)


def write_project(target: Path, name: str, runtime: str) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    path = target / "Pulumi.yaml"
    path.write_text(yaml.safe_dump({"name": name, "runtime": runtime}, sort_keys=False))
    return path


def run(options: InitOptions, env: Mapping[str, str]) -> None:
    """Initialize ``options.target_dir`` from the chosen source."""
    options.validate()
    target = Path(options.target_dir)
    if options.flux_url:
        from pko.sources import flux

        try:
            target.mkdir(mode=0o750, parents=True, exist_ok=True)
        except OSError as err:
            raise InitError(f"unable to make target directory: {err}") from err
        log.info("flux artifact fetching (digest %s)", options.flux_digest)
        try:
            flux.fetch(options.flux_url, options.flux_digest, target, max_size=flux.max_untar_size(env),
                       host_override=env.get("SOURCE_CONTROLLER_LOCALHOST") or None)
        except flux.FetchError as err:
            raise InitError(f"unable to fetch flux artifact: {err}") from err
        log.info("flux artifact fetched into %s", target)
    elif options.git_url:
        shallow = env.get("GIT_SHALLOW") == "true"
        log.info("about to clone into %s (shallow: %s)", target, shallow)
        try:
            # a local repository is the pod's own disk: accepted, as the Go agent accepts it (the operator refuses
            # local URLs in a Stack before any pod exists)
            max_size = git.max_fetch_size(env)  # first: a bad setting is refused before any connection
            commit = git.checkout(options.git_url, options.git_revision, target, git_auth(env), shallow=shallow,
                                  allow_local=True, max_size=max_size)
        except git.AlreadyCheckedOutError:
            log.info("repository was previously checked out in %s", target)
            return
        except git.GitError as err:
            raise InitError(f"unable to fetch git source: {err}") from err
        log.info("git artifact fetched into %s at %s", target, commit)
    else:
        path = write_project(target, options.project_name, options.project_runtime)
        log.info("wrote the project file %s", path)



def fetch_first(request: FetchRequest, workspace: Path, base_env: Mapping[str, str]) -> float:
    """pko: ``serve --fetch-from-stdin`` (:mod:`pko.protocol.fetchrequest`): fetch into the request's target, as
    ``init`` does, and check that `workspace` is inside it; the seconds it took. The outcome goes to the request's
    report either way. (Imported here: a workspace pod's `init` loads nothing of the protocol.)"""
    from pko.protocol import fetchrequest

    started = time.monotonic()
    try:
        try:
            options = InitOptions(**request.source)
        except TypeError:
            raise InitError("invalid fetch request: unknown source flags") from None
        run(options, {**base_env, **request.env})
        target = Path(options.target_dir).resolve()
        found = workspace.resolve()
        if found != target and target not in found.parents:
            raise InitError(f'the project directory "{request.inside}" is outside the source')
        if not found.is_dir():
            raise InitError(f'the project directory "{request.inside}" is not in the source')
    except InitError as err:
        fetchrequest.write_report(request, error=str(err))
        raise
    seconds = time.monotonic() - started
    fetchrequest.write_report(request, seconds=seconds)
    return seconds
