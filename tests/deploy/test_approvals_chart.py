"""The chart's pko approval objects (docs/approvals.md): the approver ClusterRole, and the admission policy only
where the API server serves it (1.30+; `helm install` learns that from discovery), equal to the example the
quickstart's users apply by hand."""

from __future__ import annotations

from pathlib import Path

import yaml
from helmchart import ROOT, Render

VAP_API = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"


def test_the_policy_needs_an_api_server_that_serves_it(render: Render) -> None:
    kinds = {o["kind"] for o in render()}
    assert "ValidatingAdmissionPolicy" not in kinds
    served = render(None, "--api-versions", VAP_API)
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= {o["kind"] for o in served}
    off = render({"approvals": {"admissionPolicy": False}}, "--api-versions", VAP_API)
    assert "ValidatingAdmissionPolicy" not in {o["kind"] for o in off}


def test_the_policy_is_the_examples(render: Render) -> None:
    chart = {o["kind"]: o for o in render(None, "--api-versions", VAP_API, release="pulumi-kubernetes-operator")
             if o["kind"].startswith("ValidatingAdmissionPolicy")}
    example = {d["kind"]: d for d in yaml.safe_load_all(
        Path(ROOT / "examples" / "approvals" / "admission-policy.yaml").read_text()) if d}
    assert sorted(chart) == sorted(example)
    for kind, document in example.items():
        assert chart[kind]["metadata"]["name"] == document["metadata"]["name"]
        assert chart[kind]["spec"] == document["spec"]
    assert "request.userInfo.username" in example["ValidatingAdmissionPolicy"]["spec"]["validations"][0]["expression"]


def test_the_approver_role_grants_creating_approvals(render: Render) -> None:
    [role] = [o for o in render() if o["metadata"]["name"] == "pko-pulumi-kubernetes-operator-stack-approver"]
    assert {"apiGroups": ["pulumi.com"], "resources": ["stackapprovals"],
            "verbs": ["create", "get", "list", "watch"]} in role["rules"]
    assert not [o for o in render({"approvals": {"approverRole": False}}) if "stack-approver" in o["metadata"]["name"]]
