"""The Argo CD health check evaluator (`pko.testing.argocd`) gives upstream's own expected answers for upstream's
test data, as Argo CD's `util/lua` does; and the sandbox is Argo's (no `os`, `io`). The e2e tier then runs it over
the Stacks pko produces (tests/e2e/test_argocd_health.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pko.testing import argocd

REPO = Path(__file__).resolve().parents[2]
DIRECTORY = argocd.check_dir(REPO)


@pytest.mark.parametrize(("name", "obj", "expected"), list(argocd.upstream_cases(DIRECTORY)),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_upstream_cases(name: str, obj: dict[str, object], expected: argocd.Health) -> None:
    assert argocd.HealthCheck.load(DIRECTORY)(obj) == expected


def test_the_sandbox_has_no_os_or_io() -> None:
    probe = argocd.HealthCheck('return {status = tostring(os) .. "/" .. tostring(io), message = ""}')
    assert probe({}).status == "nil/nil"


def test_lists_are_one_based_as_argo_decodes_them() -> None:
    probe = argocd.HealthCheck("return {status = obj.items[1], message = tostring(#obj.items)}")
    assert probe({"items": ["first", "second"]}) == argocd.Health("first", "2")


def _custom_check() -> argocd.HealthCheck:
    """The customisation docs/argocd.md offers, taken from the page as a user would copy it."""
    text = (REPO / "docs" / "argocd.md").read_text()
    block = text.split("resource.customizations.health.pulumi.com_Stack: |\n", 1)[1].split("```", 1)[0]
    return argocd.HealthCheck("\n".join(line[4:] for line in block.splitlines()))


def _stack(conditions: list[dict[str, str]], **spec: object) -> dict[str, object]:
    return {"metadata": {"generation": 2}, "spec": spec, "status": {"observedGeneration": 2, "conditions": conditions}}


def test_the_documented_customisation_keeps_upstreams_answers() -> None:
    custom = _custom_check()
    for _, obj, expected in argocd.upstream_cases(DIRECTORY):
        assert custom(obj) == expected


def test_the_documented_customisation_shows_suspended_and_awaiting_approval() -> None:
    custom = _custom_check()
    ready = {"type": "Ready", "status": "True", "reason": "ProcessingCompleted", "message": "up to date"}
    suspended = custom(_stack([ready, {"type": "Reconciling", "status": "False", "reason": "Suspended",
                                       "message": ""}], suspend=True))
    assert suspended.status == "Suspended"
    awaiting = custom(_stack([{"type": "Ready", "status": "False", "reason": "ProcessingCompleted", "message": ""},
                              {"type": "Reconciling", "status": "True", "reason": "AwaitingApproval",
                               "message": "awaiting approval of plan abc"}]))
    assert awaiting == argocd.Health("Suspended", "awaiting approval of plan abc")
    assert argocd.HealthCheck.load(DIRECTORY)(_stack([ready], suspend=True)).status == "Healthy"  # upstream's
