"""The Program status plan: state in (the Program, the advertised address, the time), status out."""

from __future__ import annotations

import copy
import datetime
from typing import Any

from pko.api import program as program_api
from pko.controllers.program import plan
from pko.sources import program as artifacts

NOW = datetime.datetime(2026, 3, 4, 5, 6, 7, 890000, tzinfo=datetime.UTC)
LATER = NOW + datetime.timedelta(minutes=5)

PROGRAM: dict[str, Any] = {
    "apiVersion": "pulumi.com/v1",
    "kind": "Program",
    "metadata": {"name": "hello", "namespace": "team", "generation": 2, "uid": "u-1", "resourceVersion": "77"},
    "program": {"variables": {"who": "world"}, "outputs": {"greeting": "hello ${who}"}},
}


def _plan(obj: dict[str, Any], *, advertised: str, now: datetime.datetime) -> plan.StatusPlan:
    return plan.plan(program_api.Program.model_validate(obj), advertised=advertised, now=now)


def _with_status(obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {**copy.deepcopy(obj), "status": status}


def test_new_program_gets_observed_generation_and_artifact() -> None:
    decision = _plan(PROGRAM, advertised="pko-0:9090", now=NOW)
    built = artifacts.build(program_api.Program.model_validate(PROGRAM))
    assert decision.status == {
        "observedGeneration": 2,
        "artifact": {
            "path": "programs/team/hello/2.tar.gz",
            "url": "http://pko-0:9090/programs/team/hello/2",
            "revision": "2",
            "digest": built.digest,
            "lastUpdateTime": "2026-03-04T05:06:07Z",
            "size": built.size,
        },
    }
    assert decision.artifact.data == built.data


def test_status_already_current_is_left_alone() -> None:
    first = _plan(PROGRAM, advertised="pko-0:9090", now=NOW)
    assert first.status is not None
    assert _plan(_with_status(PROGRAM, first.status), advertised="pko-0:9090", now=LATER).status is None


def test_new_generation_rewrites_the_status_with_a_new_url_and_time() -> None:
    first = _plan(PROGRAM, advertised="pko-0:9090", now=NOW)
    assert first.status is not None
    edited = _with_status(PROGRAM, first.status)
    edited["metadata"]["generation"] = 3
    edited["program"]["variables"]["who"] = "pulumi"
    second = _plan(edited, advertised="pko-0:9090", now=LATER)
    assert second.status is not None
    assert second.status["observedGeneration"] == 3
    artifact = second.status["artifact"]
    assert artifact["url"] == "http://pko-0:9090/programs/team/hello/3"
    assert artifact["revision"] == "3"
    assert artifact["digest"] != first.status["artifact"]["digest"]
    assert artifact["lastUpdateTime"] == "2026-03-04T05:11:07Z"


def test_other_advertised_address_rewrites_the_url() -> None:
    first = _plan(PROGRAM, advertised="pko-0:9090", now=NOW)
    assert first.status is not None
    moved = _plan(_with_status(PROGRAM, first.status), advertised="pko-1:9090", now=LATER)
    assert moved.status is not None
    assert moved.status["artifact"]["url"] == "http://pko-1:9090/programs/team/hello/2"


def test_status_written_by_someone_else_for_this_generation_is_corrected() -> None:
    foreign = {"observedGeneration": 2, "artifact": {"path": "programs/team/hello/2.tar.gz", "url": "http://x/",
                                                     "revision": "2", "digest": "sha256:00", "size": 1,
                                                     "lastUpdateTime": "2020-01-01T00:00:00Z"}}
    decision = _plan(_with_status(PROGRAM, foreign), advertised="pko-0:9090", now=NOW)
    assert decision.status is not None
    assert decision.status["artifact"]["digest"].startswith("sha256:")
    assert decision.status["artifact"]["digest"] != "sha256:00"


def test_urls_from_advertised_addresses() -> None:
    assert plan.artifact_url("localhost:9090", "ns", "p", 1) == "http://localhost:9090/programs/ns/p/1"
    assert plan.artifact_url("https://programs.example/", "ns", "p", 4) == "https://programs.example/programs/ns/p/4"
    assert plan.artifact_url("http://pko.ops.svc:80/base", "ns", "p", 2) == "http://pko.ops.svc:80/base/programs/ns/p/2"
    assert plan.artifact_path("ns", "p", 9) == "programs/ns/p/9.tar.gz"


def test_status_apply_names_only_the_object_and_its_status() -> None:
    status = {"observedGeneration": 2}
    assert plan.status_apply(program_api.Program.model_validate(PROGRAM), status) == {
        "apiVersion": "pulumi.com/v1",
        "kind": "Program",
        "metadata": {"name": "hello", "namespace": "team"},
        "status": status,
    }


def test_time_is_rfc3339_utc_seconds() -> None:
    offset = datetime.timezone(datetime.timedelta(hours=2))
    assert plan.format_time(datetime.datetime(2026, 1, 1, 2, 0, 0, 999, tzinfo=offset)) == "2026-01-01T00:00:00Z"
