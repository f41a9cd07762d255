"""Hypothesis-generated Stacks and Programs, applied to the real API server with pko's operator running.

Each generated object is either refused by the API server (its schema), or accepted; an accepted Stack must end
Ready, Stalled, or Reconciling with a message naming the problem, within a bounded time; and throughout, no
reconcile may raise an unexpected exception (a traceback in the log) and the operator keeps running. The examples
are drawn derandomized (the same ones every run) and their number is fixed, so the run is bounded for CI.

The generated specs mix valid shapes with hostile values: repository URLs that are commands, options, local paths
or unreachable; Flux and Program references to nothing; random JSON for any other field (wrong types, nesting,
unicode, long strings), and random Program bodies.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pko.api import crds
from pko.kube import client as kclient
from pko.kube import errors, resources
from pko.testing import controlplane, operator

pytestmark = [pytest.mark.controlplane]

STACKS = 80
PROGRAMS = 20
SETTLE = 90.0  # seconds every accepted Stack has to reach a final or precisely explained state

SAFE_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
HOSTILE_REPOS = st.sampled_from([
    "ext::sh -c touch% /tmp/pko-fuzz-pwned", "file:///etc", "/var/lib/repo.git", "--upload-pack=touch /tmp/x",
    "-oProxyCommand=x:repo", "ssh://-oProxyCommand=x/repo", "http://127.0.0.1:1/closed.git", "git://127.0.0.1:1/r",
    "https://user:pw@127.0.0.1:1/r.git", "", " ", "https://\u00e9xample\u2028/r", "a" * 300,
])
JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), SAFE_TEXT),
                    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(SAFE_TEXT, inner, max_size=3)),
                    max_leaves=8)
STACK_FIELDS = sorted(crds.stacks()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
                      ["properties"])
NAMES = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=12)

SOURCES = st.one_of(
    st.fixed_dictionaries({"projectRepo": st.one_of(HOSTILE_REPOS, SAFE_TEXT)},
                          optional={"branch": st.one_of(st.just("main"), SAFE_TEXT),
                                    "commit": st.one_of(st.just("0" * 40), SAFE_TEXT)}),
    st.fixed_dictionaries({"fluxSource": st.fixed_dictionaries({"sourceRef": st.fixed_dictionaries({
        "apiVersion": st.one_of(st.just("source.toolkit.fluxcd.io/v1"), SAFE_TEXT),
        "kind": st.one_of(st.just("GitRepository"), SAFE_TEXT), "name": st.one_of(NAMES, SAFE_TEXT)})},
        optional={"dir": st.one_of(st.just("../../.."), SAFE_TEXT)})}),
    st.fixed_dictionaries({"programRef": st.fixed_dictionaries({"name": st.one_of(NAMES, SAFE_TEXT)})}),
)
STACK_SPECS = st.tuples(st.one_of(NAMES, SAFE_TEXT), SOURCES,
                        st.dictionaries(st.sampled_from(STACK_FIELDS), JSON, max_size=3)).map(
    lambda t: {**t[2], "stack": t[0], **t[1]})
PROGRAM_BODIES = st.one_of(
    st.fixed_dictionaries({}, optional={"resources": JSON, "variables": JSON, "outputs": JSON,
                                        "configuration": JSON, "packages": JSON}),
    st.dictionaries(SAFE_TEXT, JSON, max_size=3),
)


def _draw(strategy: st.SearchStrategy[Any], count: int) -> list[Any]:
    """`count` examples of `strategy`, the same ones every run (derandomized, no example database)."""
    drawn: list[Any] = []

    @settings(max_examples=count, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(value: Any) -> None:
        drawn.append(value)

    collect()
    return drawn[:count]


class _Tracebacks(logging.Handler):
    """Keeps every record logged with an exception attached: an unexpected exception escaped a reconcile."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(record)


@pytest.fixture
def tracebacks() -> Iterator[_Tracebacks]:
    handler = _Tracebacks()
    logging.getLogger().addHandler(handler)
    yield handler
    logging.getLogger().removeHandler(handler)


@pytest.fixture
async def fuzz_operator(cluster: controlplane.ControlPlane, namespace: str, tmp_path: Path,
                        pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
                        ) -> AsyncIterator[operator.Operator]:
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    async with operator.running(cluster.kubeconfig, tmp_path / "workspaces", namespace=namespace, git_timeout=3.0,
                                workers=4) as op:
        yield op


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []}


def _settled(obj: dict[str, Any]) -> bool:
    found = _conditions(obj)
    if found.get("Ready", {}).get("status") == "True" or found.get("Stalled", {}).get("status") == "True":
        return True
    reconciling = found.get("Reconciling", {})
    return reconciling.get("status") == "True" and ": " in str(reconciling.get("message", ""))


async def test_fuzzed_stacks_and_programs(kc: kclient.Client, namespace: str, fuzz_operator: operator.Operator,
                                          tracebacks: _Tracebacks) -> None:
    accepted: list[str] = []
    unexpected: list[str] = []  # refusals other than the schema's (400/422)
    refused = 0
    for index, spec in enumerate(_draw(STACK_SPECS, STACKS)):
        try:
            await kc.create(resources.STACK.new(f"fuzz-{index}", namespace, spec=spec))
            accepted.append(f"fuzz-{index}")
        except errors.ApiError as err:
            unexpected.extend([] if err.code in (400, 422) else [f"{spec!r}: {err}"])
            refused += 1
    programs = 0
    for index, body in enumerate(_draw(PROGRAM_BODIES, PROGRAMS)):
        try:
            await kc.create(resources.PROGRAM.new(f"fuzz-p{index}", namespace, program=body))
            programs += 1
        except errors.ApiError as err:
            unexpected.extend([] if err.code in (400, 422) else [f"{body!r}: {err}"])
    assert unexpected == []
    print(f"fuzz: {len(accepted)} Stacks accepted, {refused} refused; {programs} Programs accepted")
    assert accepted, "every generated Stack was refused: the strategy no longer reaches the operator"

    deadline = time.monotonic() + SETTLE
    pending = set(accepted)
    last: dict[str, Any] = {}
    while pending and time.monotonic() < deadline:
        for name in sorted(pending):
            obj = await kc.get(resources.STACK, name, namespace)
            last[name] = (obj.get("spec"), _conditions(obj))
            if _settled(obj):
                pending.discard(name)
        await asyncio.sleep(1)
    assert not pending, {name: last.get(name) for name in pending}
    assert fuzz_operator._task is not None
    assert not fuzz_operator._task.done(), "the operator stopped"
    assert not Path("/tmp/pko-fuzz-pwned").exists()
    assert tracebacks.records == [], [f"{r.name}: {r.getMessage()}" for r in tracebacks.records]
