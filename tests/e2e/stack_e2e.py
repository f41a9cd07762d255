"""Shared pieces of the Stack end-to-end tests: a small Python program (dynamic provider, config and env
exports), Stack specs that use it from the loopback git server, and waiting/reading helpers.

Every Stack gets its own Pulumi stack name (its object name), so Stacks in one test never share state in the
per-test file backend the operator's environment points at.
"""

from __future__ import annotations

import base64
import datetime
import json
from typing import Any

import httpx
import pytest
from prometheus_client import parser

from pko.api import names
from pko.controllers import settings as operator_settings
from pko.kube import client as kclient
from pko.kube import objects, resources
from pko.runtime import controller as ctl
from pko.testing import gitserver, operator, waiting
from pko.testing.waiting import condition, wait_for, wait_gone  # noqa: F401 (re-exported for the tests)

PROJECT = "Pulumi.yaml"
PROJECT_YAML = "name: stack-e2e\nruntime: python\n"

# One program for every test: an optional real file (through a dynamic provider whose delete refuses while a
# guard file exists), config values exported as they arrive (JSON parsed), secret config and env as secrets.
PROGRAM = '''"""The Stack e2e program: exports its config and environment; optionally manages a real file."""

import json
import os

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider, UpdateResult


class FileProvider(ResourceProvider):
    def create(self, props):
        with open(props["path"], "w") as handle:
            handle.write(props["content"])
        return CreateResult(id_=props["path"], outs=props)

    def diff(self, _id, olds, news):
        changed = any(olds.get(k) != news.get(k) for k in ("path", "content", "guard"))
        return DiffResult(changes=changed, replaces=["path"] if olds.get("path") != news.get("path") else [])

    def update(self, _id, _olds, news):
        with open(news["path"], "w") as handle:
            handle.write(news["content"])
        return UpdateResult(outs=news)

    def delete(self, _id, props):
        guard = props.get("guard") or ""
        if guard and os.path.exists(guard):
            raise Exception(f"refusing to delete {props['path']}: guard file {guard} exists")
        if os.path.exists(props["path"]):
            os.remove(props["path"])


class File(Resource):
    def __init__(self, name, props, opts=None):
        super().__init__(FileProvider(), name, props, opts)


def parsed(raw):
    try:
        return json.loads(raw)
    except ValueError:
        return raw


config = pulumi.Config()
path = config.get("path")
if path:
    source = config.get("contentFile")  # read when the program runs: an up can differ from its preview
    content = open(source).read() if source else config.get("content") or "hello"
    f = File("file", {"path": path, "content": content, "guard": config.get("guard") or ""})
    pulumi.export("path", f.path)
for key in ("greeting", "settings", "cmPlain", "cmJson", "content"):
    raw = config.get(key)
    if raw is not None:
        pulumi.export(key, parsed(raw))
for key in ("literalSecret", "secretFromSecret"):
    if config.get(key) is not None:
        pulumi.export(key, config.require_secret(key))
if os.environ.get("LITERAL_ENV"):
    pulumi.export("literalEnv", os.environ["LITERAL_ENV"])
if os.environ.get("SECRET_ENV"):
    pulumi.export("secretEnv", pulumi.Output.secret(os.environ["SECRET_ENV"]))
pulumi.export("marker", open("marker.txt").read().strip() if os.path.exists("marker.txt") else "")
'''

FAILING_PROGRAM = '''import pulumi

raise RuntimeError("the program refuses to run: boom")
'''


def program_files(marker: str = "v1", failing: bool = False) -> dict[str, str]:
    """The repository content: the program (or a failing one) and a marker file the program exports."""
    return {PROJECT: PROJECT_YAML, "__main__.py": FAILING_PROGRAM if failing else PROGRAM, "marker.txt": marker}


def create_repo(git: gitserver.GitServer, name: str, **kwargs: Any) -> str:
    return git.create_repo(name, program_files(**kwargs))


def git_stack(name: str, namespace: str, url: str, *, commit: str | None = None, branch: str | None = None,
              **spec: Any) -> dict[str, Any]:
    """A Stack running the repository at `url` (a commit or a branch); `spec` adds or overrides fields."""
    body: dict[str, Any] = {"stack": name, "projectRepo": url}
    if commit is not None:
        body["commit"] = commit
    if branch is not None:
        body["branch"] = branch
    body.update(spec)
    return resources.STACK.new(name, namespace, spec=body)


def with_settings(monkeypatch: pytest.MonkeyPatch, **fields: Any) -> None:
    """Operators started in this test get these :class:`~pko.controllers.settings.Settings` fields, as the flags
    of `pko operator` would set them (`pko.testing.operator` passes only a few settings through)."""
    made = operator_settings.from_environment

    def from_environment(version: str, environ: Any = None, **given: Any) -> operator_settings.Settings:
        return made(version, environ, **(given | fields))

    monkeypatch.setattr(operator_settings, "from_environment", from_environment)


# --- reading and waiting ---------------------------------------------------------------------------------------

async def quiet(registry: Any, name: str, controller: ctl.Controller, key: objects.ObjectKey,
                timeout: float = 60.0) -> None:
    """Until controller `name` has no look at `key` scheduled and nothing running or queued: every timer its
    reconciles set for `key` (an idle timeout, a drift check, a resync) has fired and been handled, and from now
    on only an event brings `key` back. Waits for what a fixed sleep "longer than the timer" waited for, no
    longer."""
    await waiting.eventually(
        lambda: waiting.next_look(controller, key) is None and waiting.idle(registry, name),
        f"{name}: the looks scheduled for {key} to run out", timeout, interval=0.1)


def last_update(obj: dict[str, Any]) -> dict[str, Any]:
    return dict((obj.get("status") or {}).get("lastUpdate") or {})


def is_ready(obj: dict[str, Any]) -> bool:
    status = obj.get("status") or {}
    return (condition(obj, "Ready").get("status") == "True"
            and status.get("observedGeneration") == obj["metadata"]["generation"]
            and last_update(obj).get("generation") == obj["metadata"]["generation"]
            and last_update(obj).get("reconcileRequest", "") == status.get("observedReconcileRequest", ""))


def reason(obj: dict[str, Any], type_: str) -> str | None:
    found = condition(obj, type_)
    return found.get("reason") if found.get("status") == "True" else None


async def request_reconcile(kc: kclient.Client, name: str, namespace: str, value: str) -> None:
    """What `kubectl annotate stack <name> pulumi.com/reconciliation-request=<value> --overwrite` does."""
    await kc.patch(resources.STACK, name, {"metadata": {"annotations": {names.ANNOTATION_RECONCILE_REQUEST: value}}},
                   namespace)


async def updates_of(kc: kclient.Client, stack: str, namespace: str) -> list[dict[str, Any]]:
    """The Stack's Updates, oldest first."""
    found = await kc.list(resources.UPDATE, namespace, labels={names.LABEL_STACK_NAME: stack})
    return sorted(found.items, key=lambda u: (u["metadata"]["creationTimestamp"], u["metadata"]["name"]))


async def events_of(kc: kclient.Client, name: str, namespace: str, kind: str = "Stack") -> list[dict[str, Any]]:
    found = await kc.list(resources.EVENT, namespace)
    return [e for e in found.items
            if e["involvedObject"].get("name") == name and e["involvedObject"].get("kind") == kind]


async def events_with(kc: kclient.Client, name: str, namespace: str, reason: str, kind: str = "Stack",
                      timeout: float = 30.0) -> list[dict[str, Any]]:
    """The object's events of `reason`, once there is one: a reconcile writes the status first and posts its event
    after, so a test that has just seen the status waits for the event instead of racing it."""
    found: list[dict[str, Any]] = []

    async def posted() -> bool:
        found[:] = [e for e in await events_of(kc, name, namespace, kind) if e["reason"] == reason]
        return bool(found)

    await waiting.eventually(posted, f"a {reason} event of {kind} {namespace}/{name}", timeout, interval=0.2)
    return found


async def outputs_of(kc: kclient.Client, update: dict[str, Any]) -> dict[str, Any]:
    """The real (unmasked) outputs of a finished `up`, from its outputs Secret."""
    secret = await kc.get(resources.SECRET, update["status"]["outputs"], objects.namespace_of(update))
    return {k: json.loads(base64.b64decode(v)) for k, v in (secret.get("data") or {}).items()}


def timestamp(value: str) -> datetime.datetime:
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


def update_complete(obj: dict[str, Any]) -> bool:
    return condition(obj, "Complete").get("status") == "True"


# Blocks until the test creates the file named by the `release` config value (or for ten minutes): the test knows
# the Update is in flight for as long as it needs, and ends it when it is done looking.
SLOW_PROGRAM = """import os
import time

import pulumi

release = pulumi.Config().require("release")
deadline = time.monotonic() + 600
while not os.path.exists(release) and time.monotonic() < deadline:
    time.sleep(0.1)
pulumi.export("done", True)
"""


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(op: operator.Operator, prefix: str) -> Samples:
    """The operator's `/metrics` samples whose name starts with `prefix`, by (name, sorted labels)."""
    async with httpx.AsyncClient() as http:
        response = await http.get(f"http://{op.metrics_address}/metrics", timeout=10)
    response.raise_for_status()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in parser.text_string_to_metric_families(response.text) for sample in family.samples
            if sample.name.startswith(prefix)}
