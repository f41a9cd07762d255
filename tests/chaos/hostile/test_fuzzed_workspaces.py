"""Hypothesis-generated Workspaces, applied to the real API server with pko's operator running on the `local` runtime.

Each generated Workspace is either refused by the API server (with a message: a 400/422, never a 500), or
accepted; an accepted Workspace must end Ready, Stalled, or not ready for a reason the runtime or agent gave with a
message (the agent cannot start: a Secret is missing, the source cannot be fetched), within a bounded time; and
throughout, no reconcile may raise an unexpected exception (a traceback in the log), the operator keeps running,
and nothing the local runtime writes lands outside its workspace root.

The specs are drawn from the CRD's own schema (tests/integration/api/schema_strategies.py: the full inlined
PodSpec, env, resources...) with hostile values laid over them: odd images, quantities the schema may or may not
take, env names the kernel refuses, values with NUL bytes, references to missing ConfigMaps and Secrets, a Secret
holding a NUL byte, idle timeouts at the edges of the duration grammar, git/flux/local sources that are commands,
options, other files or unreachable, stacks with odd names, secrets providers, environments and config (on a real
Pulumi YAML project, so the agent starts and initialises them), and pod templates that rewrite the revision
annotation or mount paths with `..`. The examples are derandomized (the same ones every run) and their number is
fixed: `make test` runs a few dozen, ``PKO_SOAK=1`` many more; the worst cases found so far are pinned.
"""

from __future__ import annotations

import base64
import collections
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from pko.api import crds
from pko.kube import client as kclient
from pko.kube import errors, resources
from pko.testing import operator
from tests.integration.api import schema_strategies

from .fuzzing import Tracebacks, conditions, draw, settle

pytestmark = [pytest.mark.controlplane]

WORKSPACES = 150 if os.environ.get("PKO_SOAK") else 24
SETTLE = 150.0 if os.environ.get("PKO_SOAK") else 60.0  # seconds every accepted Workspace has to settle
# Ready=False reasons that are an answer, not a step (with a message saying what is wrong).
FINAL_NOT_READY = {"WaitingForReplicas", "ConnectionFailed", "InstallationFailed", "InitializationFailed",
                   "IncompatibleConfiguration"}

SPEC_SCHEMA = next(crd for crd in crds.all_crds().values() if crd["spec"]["names"]["kind"] == "Workspace")[
    "spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
NAMES = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
PRESENT_CONFIG_MAP = "fuzz-config"
PRESENT_SECRET = "fuzz-secret"
REF_NAMES = st.one_of(st.sampled_from([PRESENT_CONFIG_MAP, PRESENT_SECRET, "", "missing", "a" * 300]), NAMES)
REF_KEYS = st.one_of(st.sampled_from(["value", "nul", "missing", "", "../x"]), TEXT)

IMAGES = st.one_of(st.sampled_from([
    "", " ", "UPPER/Case:Tag", "registry.invalid:99999/img@sha256:zz", "a" * 300, "../../etc/passwd",
    "img:tag\u2028", "\u00e9", "-entrypoint", "docker.io/library/busybox:latest",
]), TEXT)
QUANTITIES = st.one_of(st.sampled_from([
    "1e400", "99999999999999999999999Ei", "-1", "1.5.5", "abc", "", "0.000000001n", "1Ki", "+.5", "1E", 2**62,
    -5, 0,
]), TEXT)
RESOURCES = st.fixed_dictionaries({}, optional={
    "requests": st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "", "x y"]), QUANTITIES,
                                max_size=2),
    "limits": st.dictionaries(st.sampled_from(["cpu", "memory", "ephemeral-storage"]), QUANTITIES, max_size=2),
})
ENV_NAMES = st.one_of(st.sampled_from([
    "A=B", "=", "", "X\u0000Y", "PATH", "HOME", "LD_PRELOAD", "PKO_AGENT_PARENT_PID", "KUBECONFIG",
    "PULUMI_BACKEND_URL", "GIT_URL", "\u00e9t\u00e9",
]), NAMES)
KEY_REF = st.fixed_dictionaries({"name": REF_NAMES, "key": REF_KEYS}, optional={"optional": st.booleans()})
ENV_VALUES = st.one_of(
    st.fixed_dictionaries({"value": st.one_of(TEXT, st.sampled_from(["1", "a\u0000b", "/nonexistent", ""]))}),
    st.fixed_dictionaries({"valueFrom": st.one_of(
        st.fixed_dictionaries({"secretKeyRef": KEY_REF}),
        st.fixed_dictionaries({"configMapKeyRef": KEY_REF}),
        st.fixed_dictionaries({"fieldRef": st.fixed_dictionaries(
            {"fieldPath": st.one_of(st.sampled_from(["metadata.namespace", "metadata.nope", ""]), TEXT)})}),
        st.fixed_dictionaries({"resourceFieldRef": st.fixed_dictionaries(
            {"resource": st.sampled_from(["requests.memory", "limits.cpu", "bogus"])})}),
    )}),
)
ENV = st.lists(st.tuples(ENV_NAMES, ENV_VALUES).map(lambda t: {"name": t[0], **t[1]}), max_size=4)
ENV_FROM = st.lists(st.fixed_dictionaries({}, optional={
    "prefix": st.one_of(st.sampled_from(["", "=", "A=", "X\u0000", "OK_"]), TEXT),
    "configMapRef": st.fixed_dictionaries({"name": REF_NAMES}, optional={"optional": st.booleans()}),
    "secretRef": st.fixed_dictionaries({"name": REF_NAMES}, optional={"optional": st.booleans()}),
}), max_size=3)
IDLE_TIMEOUTS = st.one_of(st.sampled_from([
    "0", "0s", "1ns", "0.000000001s", "15m", "1.5h", "2562047h47m16.854775807s", "2562048h", "99999999999999999999h",
    "-1s", "1d", "", "forever", "1e3s", "1h1h1h", "9" * 64,
]), TEXT)
REPOS = st.one_of(st.sampled_from([
    "ext::sh -c touch% /tmp/pko-fuzz-pwned", "file:///etc", "/var/lib/repo.git", "--upload-pack=touch /tmp/x",
    "-oProxyCommand=x:repo", "ssh://-oProxyCommand=x/repo", "http://127.0.0.1:1/closed.git", "git://127.0.0.1:1/r",
    "https://user:pw@127.0.0.1:1/r.git", "", " ", "https://\u00e9xample\u2028/r", "a" * 300,
]), TEXT)
DIRS = st.one_of(st.sampled_from(["", ".", "/", "..", "../../..", "/etc", "/nonexistent", "a/../../b", "x\u0000y"]),
                 TEXT)
GIT = st.fixed_dictionaries({"url": REPOS}, optional={
    "ref": st.one_of(st.sampled_from(["main", "0" * 40, "--orphan", "refs/../../x"]), TEXT), "dir": DIRS,
    "shallow": st.booleans(),
    "auth": st.fixed_dictionaries({}, optional={"token": KEY_REF, "sshPrivateKey": KEY_REF, "username": KEY_REF,
                                                "password": KEY_REF}),
})
FLUX = st.fixed_dictionaries({}, optional={
    "url": st.one_of(st.sampled_from(["http://127.0.0.1:1/a.tar.gz", "file:///etc/passwd", "", "ftp://x/y",
                                      "--flux-digest=x"]), TEXT),
    "digest": st.one_of(st.sampled_from(["", "sha256:zz", "sha256:" + "0" * 64, "md5:1"]), TEXT), "dir": DIRS,
})
LOCAL = st.fixed_dictionaries({}, optional={"dir": DIRS})
PROJECT = st.fixed_dictionaries({"name": st.one_of(NAMES, TEXT),
                                 "runtime": st.one_of(st.sampled_from(["yaml", "nodejs", "python", ""]), TEXT)})
MOUNT_PATHS = st.one_of(st.sampled_from(["/../../../../../escaped-mount", "/share", "/", "", "relative",
                                         "/etc/../../escaped-mount", "/ok/mount"]), TEXT)
VOLUMES = st.lists(st.tuples(NAMES, st.one_of(
    st.fixed_dictionaries({"secret": st.fixed_dictionaries({"secretName": REF_NAMES}, optional={
        "optional": st.booleans(),
        "items": st.lists(st.fixed_dictionaries({"key": REF_KEYS, "path": DIRS}), max_size=2)})}),
    st.fixed_dictionaries({"configMap": st.fixed_dictionaries({"name": REF_NAMES}, optional={
        "optional": st.booleans(),
        "items": st.lists(st.fixed_dictionaries({"key": REF_KEYS, "path": DIRS}), max_size=2)})}),
    st.just({"emptyDir": {}}),
)).map(lambda t: {"name": t[0], **t[1]}), max_size=2)
CONTAINERS = st.lists(st.fixed_dictionaries({"name": st.one_of(st.sampled_from(["pulumi", "fetch", ""]), NAMES)},
                                            optional={"image": IMAGES, "env": ENV, "envFrom": ENV_FROM,
                                                      "resources": RESOURCES,
                                                      "volumeMounts": st.lists(st.fixed_dictionaries(
                                                          {"name": NAMES, "mountPath": MOUNT_PATHS}), max_size=2),
                                                      "command": st.lists(TEXT, max_size=2)}), max_size=2)
POD_TEMPLATE = st.fixed_dictionaries({}, optional={
    "metadata": st.fixed_dictionaries({}, optional={
        "annotations": st.dictionaries(
            st.sampled_from(["auto.pulumi.com/revision-hash", "x"]),
            st.one_of(st.sampled_from(["../../../escaped", "..", ".", "", "a/b", "x" * 300, "/abs"]), TEXT),
            max_size=2),
        "labels": st.dictionaries(st.sampled_from(["app.kubernetes.io/name", "x"]), TEXT, max_size=2)}),
    "spec": st.fixed_dictionaries({}, optional={"containers": CONTAINERS, "initContainers": CONTAINERS,
                                                "volumes": VOLUMES, "serviceAccountName": TEXT}),
})
SERVICE_TEMPLATE = st.fixed_dictionaries({"metadata": st.fixed_dictionaries({}, optional={
    "labels": st.dictionaries(TEXT, TEXT, max_size=2), "annotations": st.dictionaries(TEXT, TEXT, max_size=2)})})
HOSTILE = st.fixed_dictionaries({}, optional={
    "image": IMAGES, "imagePullPolicy": st.one_of(st.sampled_from(["Always", "sometimes"]), TEXT),
    "securityProfile": st.one_of(st.sampled_from(["restricted", "baseline", "privileged"]), TEXT),
    "serviceAccountName": st.one_of(st.sampled_from(["", "missing"]), TEXT),
    "resources": RESOURCES, "env": ENV, "envFrom": ENV_FROM, "idleTimeout": IDLE_TIMEOUTS,
    "pulumiLogLevel": st.sampled_from([-1, 0, 11, 2**31 - 1, -(2**31)]),
    "podTemplate": POD_TEMPLATE, "serviceTemplate": SERVICE_TEMPLATE,
})
PROJECT_DIR = "@project"  # replaced by a real Pulumi YAML project: the agent starts and the stacks get initialised
CONFIG = st.lists(st.fixed_dictionaries(
    {"key": st.one_of(st.sampled_from(["fuzz:a", "a", "x:y:z", "", "fuzz:n.p[0]", "fuzz:\u00e9"]), TEXT)},
    optional={"value": schema_strategies.JSON, "secret": st.booleans(), "path": st.booleans(),
              "valueFrom": st.fixed_dictionaries({}, optional={"env": ENV_NAMES, "path": DIRS,
                                                              "json": st.booleans()})}),
    max_size=3, unique_by=lambda item: item["key"])
STACKS = st.lists(st.fixed_dictionaries(
    {"name": st.one_of(st.sampled_from(["dev", "organization/fuzz/dev", "a/b", "", "-x", "x" * 200]), TEXT)},
    optional={"create": st.booleans(), "config": CONFIG, "environment": st.lists(TEXT, max_size=2),
              "secretsProvider": st.one_of(st.sampled_from(["passphrase", "awskms://nope", "", "default"]), TEXT)}),
    max_size=2, unique_by=lambda stack: stack["name"])
SOURCE = st.one_of(st.just({}), st.fixed_dictionaries({"git": GIT}), st.fixed_dictionaries({"flux": FLUX}),
                   st.fixed_dictionaries({"local": LOCAL}), st.fixed_dictionaries({"projectInfo": PROJECT}),
                   st.fixed_dictionaries({"local": st.just({"dir": PROJECT_DIR}), "stacks": STACKS}))
WORKSPACE_SPECS = st.one_of(
    schema_strategies.from_schema(SPEC_SCHEMA),  # valid shapes of every field
    st.tuples(schema_strategies.from_schema(SPEC_SCHEMA, frozenset({"git", "flux", "local", "projectInfo"})),
              SOURCE, HOSTILE).map(lambda t: {**t[0], **t[1], **t[2]}),
    st.tuples(SOURCE, HOSTILE).map(lambda t: {**t[0], **t[1]}),
    # a project the agent can open: the stacks are selected, created and configured (hostile names and config)
    st.tuples(STACKS, HOSTILE).map(lambda t: {"local": {"dir": PROJECT_DIR}, "stacks": t[0], **t[1]}),
)
# The worst cases, always run (the draw may miss them): each once broke the local runtime or the status writes.
PINNED: list[dict[str, Any]] = [
    {"local": {"dir": "no/such/project"}},  # FileNotFoundError out of every reconcile, no status at all
    {"projectInfo": {"name": "p", "runtime": "\x80\x85\x9f\ufffe"}},  # a 400 on every status apply quoting it
    {"env": [{"name": "A=B", "value": "1"}]},  # ValueError out of the agent's start
    {"env": [{"name": "NUL", "valueFrom": {"secretKeyRef": {"name": PRESENT_SECRET, "key": "nul"}}}]},
    {"envFrom": [{"prefix": "A=", "configMapRef": {"name": PRESENT_CONFIG_MAP}}]},
    {"env": [{"name": "PKO_AGENT_PARENT_PID", "value": "1"}]},  # the agent would outlive its operator
    {"podTemplate": {"metadata": {"annotations": {"auto.pulumi.com/revision-hash": "../../../escaped"}}}},
    {"podTemplate": {"metadata": {"annotations": {"auto.pulumi.com/revision-hash": "x" * 300}}}},
    {"podTemplate": {"spec": {
        "containers": [{"name": "pulumi",
                        "volumeMounts": [{"name": "s", "mountPath": "/../../../../../escaped-mount"}]}],
        "volumes": [{"name": "s", "secret": {"secretName": PRESENT_SECRET}}]}}},
    {"idleTimeout": "2562047h47m16.854775807s"}, {"idleTimeout": "1ns"},
    {"local": {"dir": PROJECT_DIR}, "stacks": [{"name": "dev", "create": True, "config": [
        {"key": "fuzz:a", "value": "\x80\x85"}, {"key": "fuzz:b", "valueFrom": {"env": "MISSING"}}]}]},
]


def _settled(obj: dict[str, Any]) -> bool:
    """Ready or Stalled, or not ready for a reason that is an answer, at the Workspace's current generation."""
    found = conditions(obj)
    generation = obj["metadata"].get("generation")
    ready, stalled = found.get("Ready", {}), found.get("Stalled", {})
    if ready.get("observedGeneration") != generation:
        return False
    if ready.get("status") == "True" or stalled.get("status") == "True":
        return True
    return ready.get("reason") in FINAL_NOT_READY and bool(ready.get("message"))


async def _references(kc: kclient.Client, namespace: str) -> None:
    """The ConfigMap and Secret the generated references may name (the Secret holds a NUL byte and a key no
    environment variable can be named after)."""
    await kc.create(resources.CONFIG_MAP.new(PRESENT_CONFIG_MAP, namespace, data={"value": "v", "key.with-dash": "d"}))
    await kc.create(resources.SECRET.new(PRESENT_SECRET, namespace, data={
        key: base64.b64encode(value).decode() for key, value in
        {"value": b"s", "nul": b"a\x00b", "bad.env-name": b"x", "binary": b"\xff\xfe"}.items()}))


def _with_project(spec: dict[str, Any], project: Path) -> dict[str, Any]:
    if (spec.get("local") or {}).get("dir") == PROJECT_DIR:
        return {**spec, "local": {"dir": str(project)}}
    return spec


async def test_fuzzed_workspaces(kc: kclient.Client, namespace: str, fuzz_operator: operator.Operator,
                                 tracebacks: Tracebacks, tmp_path: Path) -> None:
    await _references(kc, namespace)
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: fuzz\nruntime: yaml\n")
    accepted: list[str] = []
    unexpected: list[str] = []  # refusals other than the schema's (400/422), or without a message
    for index, spec in enumerate(PINNED + draw(WORKSPACE_SPECS, WORKSPACES)):
        try:
            await kc.create(resources.WORKSPACE.new(f"fuzz-{index}", namespace, spec=_with_project(spec, project)))
            accepted.append(f"fuzz-{index}")
        except errors.ApiError as err:
            if err.code not in (400, 422) or not err.message:
                unexpected.append(f"{spec!r}: {err}")
    assert unexpected == []
    print(f"fuzz: {len(accepted)} of {len(PINNED) + WORKSPACES} Workspaces accepted")
    assert len(accepted) >= WORKSPACES // 4, "the API server refused most Workspaces: the strategy misses the operator"

    pending, last = await settle(kc, resources.WORKSPACE, namespace, accepted, _settled, SETTLE)
    outcomes = collections.Counter(
        f"{c.get('Ready', {}).get('status')}/{c.get('Ready', {}).get('reason')}" for _, c in last.values())
    print(f"fuzz: outcomes {dict(outcomes)}")
    assert tracebacks.records == [], [f"{r.name}: {r.getMessage()}" for r in tracebacks.records]
    assert not pending, {name: last.get(name) for name in pending}
    assert fuzz_operator._task is not None
    assert not fuzz_operator._task.done(), "the operator stopped"
    assert not Path("/tmp/pko-fuzz-pwned").exists()
    escaped = [p.name for p in tmp_path.iterdir() if p.name.startswith("escaped")]
    assert escaped == [], "the local runtime wrote outside its workspace root"
