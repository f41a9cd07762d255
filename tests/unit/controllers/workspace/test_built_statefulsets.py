"""A Workspace's StatefulSet is built once for each revision and handed out as a copy; anything it is built from
makes a new one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pko.api import workspace as ws_api
from pko.controllers.workspace import built, manifests
from pko.kube import owners


def _workspace(generation: int | None = 1, uid: str | None = "u1") -> ws_api.Workspace:
    return ws_api.Workspace.model_validate({
        "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace",
        "metadata": {"name": "w", "namespace": "ns", "uid": uid, "generation": generation},
        "spec": {"securityProfile": "restricted", "stacks": [{"name": "dev", "create": True}],
                 "podTemplate": {"spec": {"containers": [{"name": "pulumi", "env": [{"name": "X", "value": "y"}]}]}}},
    })


def _key(workspace: ws_api.Workspace, **changed: Any) -> object:
    values: dict[str, Any] = {"pod_generation": 1, "carried": {}, "default_env": {"A": "b"}}
    return built.key(workspace, **(values | changed))


def _counted_build(workspace: ws_api.Workspace, builds: list[int]) -> Callable[[], dict[str, Any]]:
    """The reconciler's build of `workspace`'s StatefulSet, counting each call in `builds`."""
    def build() -> dict[str, Any]:
        builds.append(1)
        return owners.set_controller_reference(
            manifests.statefulset(workspace, manifests.AgentImage("agent:1"), pod_generation=1,
                                  default_env={"A": "b"}), workspace)
    return build


def test_built_once_and_handed_out_as_copies() -> None:
    workspace = _workspace()
    builds: list[int] = []
    build = _counted_build(workspace, builds)

    memo = built.Built()
    first = memo.get(_key(workspace), build, replicas=1)
    first["spec"]["template"]["spec"]["containers"][0]["env"].clear()  # a runtime may change what it is given
    first["metadata"]["labels"]["changed"] = "yes"
    second = memo.get(_key(workspace), build, replicas=1)
    assert len(builds) == 1
    assert second == build()  # as built, the first copy's changes nowhere
    assert second["metadata"]["ownerReferences"][0]["uid"] == "u1"


def test_anything_it_is_built_from_is_another_key() -> None:
    workspace = _workspace()
    same = _key(workspace)
    assert _key(_workspace()) == same
    others = [_key(_workspace(generation=2)), _key(_workspace(uid="u2")),
              _key(workspace, pod_generation=2), _key(workspace, carried={"shard": "a"}),
              _key(workspace, default_env={"A": "c"})]
    assert same not in others
    assert len(set(others)) == len(others)


def test_a_workspace_the_api_server_did_not_make_is_built_every_time() -> None:
    assert _key(_workspace(uid=None)) is None
    assert _key(_workspace(generation=None)) is None
    builds: list[int] = []
    memo = built.Built()
    for _ in range(2):
        memo.get(None, lambda: builds.append(1) or {"spec": {}}, replicas=1)  # type: ignore[func-returns-value]
    assert len(builds) == 2
    assert len(memo) == 0


def test_the_least_recently_used_goes_first() -> None:
    memo = built.Built(kept=2)
    builds: list[str] = []

    def build(name: str) -> Any:
        return lambda: builds.append(name) or {"name": name, "spec": {}}

    memo.get("a", build("a"), replicas=1)
    memo.get("b", build("b"), replicas=1)
    memo.get("a", build("a"), replicas=1)  # a used again: b is now the oldest
    memo.get("c", build("c"), replicas=1)
    memo.get("a", build("a"), replicas=1)
    memo.get("b", build("b"), replicas=1)
    assert builds == ["a", "b", "c", "b"]


def test_a_sleep_and_a_wake_are_one_build_each_copy_with_its_replicas() -> None:
    workspace = _workspace()
    builds: list[int] = []
    build = _counted_build(workspace, builds)

    memo = built.Built()
    awake = memo.get(_key(workspace), build, replicas=1)
    asleep = memo.get(_key(workspace), build, replicas=0)
    again = memo.get(_key(workspace), build, replicas=1)
    assert len(builds) == 1
    assert (awake["spec"]["replicas"], asleep["spec"]["replicas"], again["spec"]["replicas"]) == (1, 0, 1)
    assert {**asleep, "spec": {**asleep["spec"], "replicas": 1}} == awake
    assert memo.get(None, build, replicas=0)["spec"]["replicas"] == 0  # built every time, replicas still set


def test_a_pod_digest_is_computed_once_a_uid_and_generation() -> None:
    computed: list[str] = []

    def compute(workspace: ws_api.Workspace) -> str:
        computed.append(workspace.metadata.uid or "")
        return manifests.pod_digest(workspace)

    digests = built.Digests(compute, kept=2)
    first = _workspace()
    assert digests.get(first) == manifests.pod_digest(first)
    assert digests.get(_workspace()) == manifests.pod_digest(first)
    assert len(computed) == 1
    changed = _workspace(generation=2)
    changed.spec.stacks[0].name = "prod"  # type: ignore[union-attr,index]
    assert digests.get(changed) == manifests.pod_digest(changed) != manifests.pod_digest(first)
    digests.get(_workspace(uid="u2"))
    assert len(computed) == 3
    digests.get(_workspace())  # the least recently used went when a third was kept
    assert len(computed) == 4
    for unkept in (_workspace(uid=None), _workspace(generation=None)):
        digests.get(unkept)
        digests.get(unkept)
    assert len(computed) == 8
