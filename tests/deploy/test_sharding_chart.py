"""The chart's `sharding.shards` (docs/scale.md#shards): one operator Deployment and Service per shard beside the main
ones, each selecting only its own pods, started with its shard's flag and advertising its own file server; an
admission policy that refuses labels naming no shard; names that cannot name a Lease refused at render time."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from helmchart import CHART, Render


def _by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def _args(deployment: dict[str, Any]) -> list[str]:
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def test_no_shards_keep_one_operator_that_watches_everything(render: Render) -> None:
    objects = render()
    (deployment,) = _by_kind(objects, "Deployment").values()
    assert not [a for a in _args(deployment) if "shard" in a or "selector" in a]
    assert len(_by_kind(objects, "Service")) == 1
    assert not _by_kind(objects, "ValidatingAdmissionPolicy")


def test_each_shard_gets_an_operator_and_a_service_of_its_own(render: Render) -> None:
    objects = render({"sharding": {"shards": ["team-a", "team-b"]}})
    deployments, services = _by_kind(objects, "Deployment"), _by_kind(objects, "Service")
    main = deployments.pop("pko-pulumi-kubernetes-operator-controller-manager")
    assert "--watch-label-selector=!sharding.fluxcd.io/key" in _args(main)
    assert set(deployments) == {f"pko-pulumi-kubernetes-operator-controller-manager-team-{x}" for x in "ab"}
    pods = {name: d["spec"]["template"]["metadata"]["labels"] for name, d in deployments.items()}
    pods["main"] = main["spec"]["template"]["metadata"]["labels"]
    selectors = [d["spec"]["selector"]["matchLabels"] for d in [main, *deployments.values()]]
    for selector in selectors:  # each Deployment selects its own pods and no other's
        matched = [name for name, labels in pods.items() if selector.items() <= labels.items()]
        assert len(matched) == 1, (selector, matched)
    for shard in ("team-a", "team-b"):
        deployment = deployments[f"pko-pulumi-kubernetes-operator-controller-manager-{shard}"]
        args = _args(deployment)
        assert f"--shard-key={shard}" in args
        service = services[f"pko-pulumi-kubernetes-operator-{shard}"]
        assert f"--program-fs-adv-addr=pko-pulumi-kubernetes-operator-{shard}.$(POD_NAMESPACE):80" in args
        assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert services["pko-pulumi-kubernetes-operator"]["spec"]["selector"] == main["spec"]["selector"]["matchLabels"]


def test_an_admission_policy_refuses_labels_that_name_no_shard(render: Render) -> None:
    objects = render({"sharding": {"shards": ["team-a", "team-b"]}})
    (policy,) = _by_kind(objects, "ValidatingAdmissionPolicy").values()
    (binding,) = _by_kind(objects, "ValidatingAdmissionPolicyBinding").values()
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    (rule,) = policy["spec"]["validations"]
    assert '["team-a", "team-b"]' in rule["expression"]
    assert "its shards: team-a, team-b" in rule["messageExpression"]
    off = render({"sharding": {"shards": ["team-a"], "admissionPolicy": False}})
    assert not _by_kind(off, "ValidatingAdmissionPolicy")


@pytest.mark.parametrize(("shards", "said"), [
    (["Team_A"], '"Team_A" is not a valid shard name'),
    (["a", "a"], '"a" is listed twice'),
])
def test_bad_shard_names_are_refused_at_render_time(helm: Path, tmp_path: Path, shards: list[str], said: str) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("sharding:\n  shards: [" + ", ".join(shards) + "]\n")
    done = subprocess.run([str(helm), "template", "pko", str(CHART), "--values", str(values)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert f"sharding.shards: {said}" in done.stderr
