"""What a Workspace says while its pod cannot start: the kubelet's own reason, or nothing while it is just slow."""

from __future__ import annotations

from typing import Any

from pko.controllers.workspace import podproblems


def _pod(init: list[dict[str, Any]] | None = None, main: list[dict[str, Any]] | None = None,
         conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"status": {"initContainerStatuses": init or [], "containerStatuses": main or [],
                       "conditions": conditions or []}}


def _waiting(name: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"name": name, "state": {"waiting": {"reason": reason, "message": message}}}


def test_a_container_refused_by_the_restricted_profile_is_named_with_the_kubelets_message() -> None:
    pod = _pod(main=[_waiting("pulumi", "CreateContainerConfigError", "container's runAsUser breaks non-root policy")])
    assert podproblems.problem(pod) == (
        'container "pulumi": CreateContainerConfigError: container\'s runAsUser breaks non-root policy')


def test_init_containers_come_first() -> None:
    pod = _pod(init=[{"name": "bootstrap", "state": {"terminated": {"exitCode": 0}}},
                     _waiting("fetch", "CrashLoopBackOff", "back-off 10s restarting failed container")],
               main=[_waiting("pulumi", "PodInitializing")])
    assert podproblems.problem(pod) == 'container "fetch": CrashLoopBackOff: back-off 10s restarting failed container'


def test_a_crash_looping_container_adds_its_last_termination_message() -> None:
    """The fetch container's refusal (written to its termination log by the agent's init) reaches the Workspace."""
    fetch = _waiting("fetch", "CrashLoopBackOff", "back-off 20s restarting failed container")
    fetch["lastState"] = {"terminated": {"exitCode": 1, "reason": "Error", "message": (
        "unable to fetch git source: https://git.example/big.git sent more than 65536 bytes of pack data,\n"
        "the size cap (GIT_MAX_FETCH_SIZE_BYTES); the fetch was aborted\n")}}
    assert podproblems.problem(_pod(init=[fetch])) == (
        'container "fetch": CrashLoopBackOff: back-off 20s restarting failed container; it exited with 1: '
        "unable to fetch git source: https://git.example/big.git sent more than 65536 bytes of pack data, the size "
        "cap (GIT_MAX_FETCH_SIZE_BYTES); the fetch was aborted")


def test_a_pod_that_is_merely_starting_has_no_problem() -> None:
    assert podproblems.problem(None) is None
    assert podproblems.problem({}) is None
    assert podproblems.problem(_pod(init=[_waiting("bootstrap", "PodInitializing")],
                                    main=[_waiting("pulumi", "ContainerCreating")])) is None


def test_an_unschedulable_pod_says_why() -> None:
    pod = _pod(conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                            "message": "0/1 nodes are available: 1 Insufficient cpu."}])
    assert podproblems.problem(pod) == "pod not scheduled: 0/1 nodes are available: 1 Insufficient cpu."


def _failed_create(uid: str, when: str, why: str, reason: str = podproblems.FAILED_CREATE) -> dict[str, Any]:
    return {"reason": reason, "involvedObject": {"kind": "StatefulSet", "name": "s-workspace", "uid": uid},
            "lastTimestamp": when,
            "message": f'create Pod s-workspace-0 in StatefulSet s-workspace failed error: pods "s-workspace-0" is '
                       f"forbidden: {why}"}


def test_a_pod_the_api_server_refused_to_create_says_why_from_the_newest_event_of_that_statefulset() -> None:
    quota = "exceeded quota: pods, requested: pods=1, used: pods=0, limited: pods=0"
    events = [
        _failed_create("old-uid", "2026-12-07T10:59:00Z", "an earlier StatefulSet of the same name"),
        _failed_create("uid", "2026-12-07T10:00:00Z", 'violates PodSecurity "restricted:latest": privileged'),
        _failed_create("uid", "2026-12-07T10:05:00Z", quota),
        _failed_create("uid", "2026-12-07T10:30:00Z", "not a refusal", reason="SuccessfulCreate"),
    ]
    assert podproblems.refused(events, "uid") == f"pod not created: pods \"s-workspace-0\" is forbidden: {quota}"
    assert podproblems.refused(events, "another") is None
    assert podproblems.refused([], "uid") is None
    odd = {**_failed_create("uid", "2026-12-07T11:00:00Z", ""), "message": "admission webhook  \"x\"\n denied it"}
    assert podproblems.refused([*events, odd], "uid") == 'pod not created: admission webhook "x" denied it'


def test_a_refusal_told_before_the_workspace_began_to_wait_is_not_this_wait_s() -> None:
    """A pool's StatefulSet keeps its uid across sleeps: a quota that refused its pod an hour ago, and was raised
    since, is not why today's wake waits."""
    old = _failed_create("uid", "2026-12-07T10:05:00Z", "exceeded quota: q")
    assert podproblems.refused([old], "uid", since="2026-12-07T11:00:00Z") is None
    assert podproblems.refused([old], "uid", since="2026-12-07T10:05:00Z") is not None
    told = {**_failed_create("uid", "", "exceeded quota: q"), "lastTimestamp": None,
            "eventTime": "2026-12-07T11:00:01.250000Z"}  # an events.k8s.io event: microseconds, no lastTimestamp
    assert podproblems.refused([old, told], "uid", since="2026-12-07T11:00:00Z") == (
        'pod not created: pods "s-workspace-0" is forbidden: exceeded quota: q')


def test_image_volumes_the_api_server_left_out_are_named() -> None:
    def statefulset(*volumes: dict[str, Any]) -> dict[str, Any]:
        return {"spec": {"template": {"spec": {"volumes": list(volumes)}}}}
    share = {"name": "share", "emptyDir": {}}
    agent = {"name": "pko-agent", "image": {"reference": "pko/pko:dev"}}
    plugin = {"name": "plugin-random", "image": {"reference": "plugins/random:4.19.1"}}
    sent = statefulset(share, agent, plugin)
    assert podproblems.dropped_image_volumes(sent, statefulset(share)) == ["pko-agent", "plugin-random"]
    assert podproblems.dropped_image_volumes(sent, statefulset(share, agent, plugin)) == []
    assert podproblems.dropped_image_volumes(statefulset(share), statefulset()) == []  # only image volumes count
    assert podproblems.dropped_message(["pko-agent"]) == (
        "the API server dropped the image volume pko-agent: this cluster does not serve image volumes "
        "(Kubernetes 1.35, or 1.31-1.34 with the ImageVolume feature gate)")


def test_a_repeating_refusal_counts_from_its_last_repeat() -> None:
    """An events.k8s.io series keeps its first time in `eventTime` and its last in `series.lastObservedTime`: a
    refusal that began before the wait and is still told is this wait's; of two, the one told last wins."""
    series = {**_failed_create("uid", "", "exceeded quota: q"), "lastTimestamp": None,
              "eventTime": "2026-12-07T10:00:00.000000Z",
              "series": {"count": 9, "lastObservedTime": "2026-12-07T11:00:05.000000Z"}}
    other = _failed_create("uid", "2026-12-07T11:00:02Z", "a webhook said no")
    assert podproblems.refused([series, other], "uid", since="2026-12-07T11:00:00Z") == (
        'pod not created: pods "s-workspace-0" is forbidden: exceeded quota: q')


def test_an_api_server_text_is_quoted_at_a_bounded_length() -> None:
    long = _failed_create("uid", "2026-12-07T11:00:00Z", "denied: " + "x" * 100_000)
    said = podproblems.refused([long], "uid")
    assert said is not None
    assert len(said) == podproblems.MAX_QUOTED
    assert said.endswith("…")
    assert podproblems.shortened("short") == "short"


def test_a_quota_refusal_whose_figures_moved_is_the_same_refusal() -> None:
    told = "pod not created: exceeded quota: q, requested: pods=1, used: pods=7, limited: pods=7"
    assert podproblems.same_refusal(told, told.replace("7", "12"))
    assert not podproblems.same_refusal(told, told.replace("exceeded quota: q", "exceeded quota: r"))
    assert not podproblems.same_refusal(None, told)


def test_only_a_change_a_statefulset_cannot_take_in_place_is_a_migration() -> None:
    """The API server's words for a StatefulSet update that touches an immutable field (here as the cause it
    lists), against a template it refuses, or an admission policy's refusal (whose details name the resource)."""
    immutable = ("StatefulSet.apps \"w-workspace\" is invalid: spec: Forbidden: updates to statefulset spec for "
                 "fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', "
                 "'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden")
    cause = {"reason": "FieldValueForbidden", "field": "spec",
             "message": immutable.split("spec: ", 1)[1]}
    assert podproblems.immutable_change({"kind": "StatefulSet", "causes": [cause]}, "")
    assert podproblems.immutable_change({}, immutable)
    typo = {"reason": "FieldValueNotFound", "field": "spec.template.spec.containers[0].volumeMounts[0].name",
            "message": 'Not found: "cache-typo"'}
    assert not podproblems.immutable_change({"kind": "StatefulSet", "causes": [typo]},
                                            'StatefulSet.apps "w-workspace" is invalid: ' + typo["message"])
    policy = ("statefulsets.apps \"w-workspace\" is forbidden: ValidatingAdmissionPolicy 'no-x' with binding "
              "'no-x' denied request: no x")
    assert not podproblems.immutable_change({"kind": "statefulsets", "group": "apps"}, policy)
