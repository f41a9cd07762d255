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

from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from pko.api import crds
from pko.kube import client as kclient
from pko.kube import errors, resources
from pko.testing import operator

from .fuzzing import Tracebacks, conditions, draw, settle

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


def _settled(obj: dict[str, Any]) -> bool:
    found = conditions(obj)
    if found.get("Ready", {}).get("status") == "True" or found.get("Stalled", {}).get("status") == "True":
        return True
    reconciling = found.get("Reconciling", {})
    return reconciling.get("status") == "True" and ": " in str(reconciling.get("message", ""))


async def test_fuzzed_stacks_and_programs(kc: kclient.Client, namespace: str, fuzz_operator: operator.Operator,
                                          tracebacks: Tracebacks) -> None:
    accepted: list[str] = []
    unexpected: list[str] = []  # refusals other than the schema's (400/422)
    refused = 0
    for index, spec in enumerate(draw(STACK_SPECS, STACKS)):
        try:
            await kc.create(resources.STACK.new(f"fuzz-{index}", namespace, spec=spec))
            accepted.append(f"fuzz-{index}")
        except errors.ApiError as err:
            unexpected.extend([] if err.code in (400, 422) else [f"{spec!r}: {err}"])
            refused += 1
    programs = 0
    for index, body in enumerate(draw(PROGRAM_BODIES, PROGRAMS)):
        try:
            await kc.create(resources.PROGRAM.new(f"fuzz-p{index}", namespace, program=body))
            programs += 1
        except errors.ApiError as err:
            unexpected.extend([] if err.code in (400, 422) else [f"{body!r}: {err}"])
    assert unexpected == []
    print(f"fuzz: {len(accepted)} Stacks accepted, {refused} refused; {programs} Programs accepted")
    assert accepted, "every generated Stack was refused: the strategy no longer reaches the operator"

    pending, last = await settle(kc, resources.STACK, namespace, accepted, _settled, SETTLE)
    assert not pending, {name: last.get(name) for name in pending}
    assert fuzz_operator._task is not None
    assert not fuzz_operator._task.done(), "the operator stopped"
    assert not Path("/tmp/pko-fuzz-pwned").exists()
    assert tracebacks.records == [], [f"{r.name}: {r.getMessage()}" for r in tracebacks.records]
