"""Planted secret values never show where they should not, end to end, with the operator logging at debug level.

A Stack on a private repository (basic auth from a Secret, resolved by the operator for its branch and used again
by the agent's init), a secret config value, a secret environment variable exported as a secret output, and a
Pulumi access token in the environment. When the Stack is Ready, every place the run wrote is searched for each
value, also base64-encoded: the operator's log (debug, both encodings), every agent and init log, every Event of
the namespace, the status of every Stack, Workspace and Update, the Workspace and Update objects whole, and the
outputs Secret, which must hold exactly the two values the program exported as secrets and nothing else planted.
"""

from __future__ import annotations

import base64
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import stack_e2e as e2e

from pko.cli import logs
from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import gitserver, operator

pytestmark = [pytest.mark.controlplane, pytest.mark.pulumi]

GIT_PASSWORD = "gitpw-PLANTED-4f1c9e"
CONFIG_SECRET = "config-PLANTED-8b2d71"
ENV_SECRET = "env-PLANTED-3a9e55"
ACCESS_TOKEN = "pul-PLANTED-0c7d2b9e61"
PLANTED = {"git password": GIT_PASSWORD, "config secret": CONFIG_SECRET, "env secret": ENV_SECRET,
           "access token": ACCESS_TOKEN}
EXPORTED_AS_SECRETS = {"secretFromSecret": CONFIG_SECRET, "secretEnv": ENV_SECRET}


@pytest.fixture
def debug_log() -> Iterator[dict[str, io.StringIO]]:
    """Everything logged in this process at DEBUG, in both of the operator's encodings."""
    streams = {"json": io.StringIO(), "console": io.StringIO()}
    handlers = []
    for encoding, stream in streams.items():
        handler = logging.StreamHandler(stream)
        handler.setLevel(logging.DEBUG)
        handler.setFormatter(logs.formatter(json_lines=encoding == "json"))
        handlers.append(handler)
    root = logging.getLogger()
    level = root.level
    root.handlers.extend(handlers)
    try:
        yield streams
    finally:
        for handler in handlers:
            root.removeHandler(handler)
        root.setLevel(level)


def _forms(value: str) -> list[str]:
    return [value, base64.b64encode(value.encode()).decode()]


def _leaks(where: str, text: str, allowed: tuple[str, ...] = ()) -> list[str]:
    """One line per planted value found in `text`, quoting the first line it is on (the values are test data)."""
    found = []
    for what, value in PLANTED.items():
        for form in _forms(value):
            if value not in allowed and form in text:
                line = next(line for line in text.splitlines() if form in line)
                found.append(f"{what} in {where}: {line[:400]}")
    return found


async def test_planted_secrets_appear_only_where_intended(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, stack_operator: operator.Operator,
    debug_log: dict[str, io.StringIO], tmp_path: Path,
) -> None:
    logging.getLogger().setLevel(logging.DEBUG)
    repo = f"private-{namespace}"
    e2e.create_repo(git, repo)
    git.protect(repo, "pko-user", GIT_PASSWORD)
    await kc.create(resources.SECRET.new("planted", namespace, stringData={
        "user": "pko-user", "password": GIT_PASSWORD, "config": CONFIG_SECRET, "env": ENV_SECRET,
        "token": ACCESS_TOKEN}))

    def ref(key: str) -> dict[str, object]:
        return {"type": "Secret", "secret": {"name": "planted", "key": key}}

    await kc.create(e2e.git_stack(
        "planted", namespace, git.http_url(repo), branch="main",
        gitAuth={"basicAuth": {"userName": ref("user"), "password": ref("password")}},
        secretsRef={"secretFromSecret": ref("config")},
        envRefs={"SECRET_ENV": ref("env"), "PULUMI_ACCESS_TOKEN": ref("token")},
    ))
    stack = await e2e.wait_for(kc, resources.STACK, "planted", namespace, e2e.is_ready, timeout=240)
    assert stack["status"]["outputs"]["secretFromSecret"] == "[secret]"
    # the Update controller posts its event after the Update's status, which the Stack may absorb first: the search
    # below waits for it, so that it covers that event too
    await e2e.events_with(kc, e2e.last_update(stack)["name"], namespace, "UpdateSucceeded", kind="Update")

    found: list[str] = []
    for encoding, stream in debug_log.items():
        text = stream.getvalue()
        assert "DEBUG" in text.upper() or encoding == "json", "the operator did not log at debug level"
        found += _leaks(f"the operator's {encoding} log", text)
    logs_seen = sorted((tmp_path / "workspaces").rglob("*.log"))
    assert logs_seen, "no agent or init log to search"
    for path in logs_seen:
        found += _leaks(f"{path.name} of {path.parent.name}", path.read_text(errors="replace"))
    for event in (await kc.list(resources.EVENT, namespace)).items:
        found += _leaks(f"event {event.get('reason')}", json.dumps(event))
    for kind in (resources.STACK, resources.WORKSPACE, resources.UPDATE):
        for obj in (await kc.list(kind, namespace)).items:
            whole = obj if kind is not resources.STACK else {"status": obj.get("status")}
            found += _leaks(f"{kind.kind} {obj['metadata']['name']}", json.dumps(whole))

    (update,) = await e2e.updates_of(kc, "planted", namespace)
    outputs_secret = await kc.get(resources.SECRET, update["status"]["outputs"], namespace)
    found += _leaks("the outputs Secret", json.dumps(outputs_secret),
                    allowed=tuple(EXPORTED_AS_SECRETS.values()))
    real = await e2e.outputs_of(kc, update)
    assert {k: real[k] for k in EXPORTED_AS_SECRETS} == EXPORTED_AS_SECRETS
    assert found == [], found
