"""What the program file server answers, and the address it advertises — pure decisions."""

from __future__ import annotations

from typing import Any

import pytest

from pko.api import program as program_api
from pko.controllers.program import address, serving
from pko.sources import program as artifacts

PROGRAM: dict[str, Any] = {
    "apiVersion": "pulumi.com/v1",
    "kind": "Program",
    "metadata": {"name": "hello", "namespace": "team", "generation": 4},
    "program": {"outputs": {"greeting": "hello"}},
}


@pytest.mark.parametrize(("target", "expected"), [
    ("/programs/team/hello/4", serving.ProgramRef("team", "hello", 4)),
    ("/programs/team/hello/4?x=1", serving.ProgramRef("team", "hello", 4)),
    ("/programs/team/hel%6Co/4", serving.ProgramRef("team", "hello", 4)),
    ("/programs/team/hello/latest", serving.ProgramRef("team", "hello", 0)),
    ("/programs/team/hello/", serving.ProgramRef("team", "hello", 0)),
    ("/programs//hello/4", serving.ProgramRef("", "hello", 4)),
])
def test_paths_naming_a_program(target: str, expected: serving.ProgramRef) -> None:
    assert serving.parse(target) == expected


@pytest.mark.parametrize(("target", "status"), [
    ("/programs/", 400),
    ("/programs/team/hello", 400),
    ("/programs/team/hello/4/extra", 400),
    ("/programs/team", 400),
    ("/programs", 404),
    ("/other/team/hello/4", 404),
])
def test_paths_naming_no_program(target: str, status: int) -> None:
    reply = serving.parse(target)
    assert isinstance(reply, serving.Reply)
    assert reply.status == status
    assert ("Content-Type", "text/plain; charset=utf-8") in reply.headers


def test_current_generation_is_served_as_the_artifact() -> None:
    reply = serving.reply(serving.ProgramRef("team", "hello", 4), PROGRAM)
    assert reply.status == 200
    assert reply.headers == (("Content-Type", "application/gzip"),
                             ("Content-Disposition", "attachment; filename=project.tar.gz"))
    assert reply.body == artifacts.build(program_api.Program.model_validate(PROGRAM)).data


def test_missing_program_or_other_generation_is_404() -> None:
    assert serving.reply(serving.ProgramRef("team", "hello", 4), None).status == 404
    stale = serving.reply(serving.ProgramRef("team", "hello", 3), PROGRAM)
    assert stale.status == 404
    assert b"generation 4 does not match requested generation 3" in stale.body
    assert serving.reply(serving.ProgramRef("team", "hello", 0), PROGRAM).status == 404


def _hostname() -> str:
    return "machine"


@pytest.mark.parametrize(("listen", "explicit", "env", "expected"), [
    (":9090", None, {}, "localhost:9090"),
    ("0.0.0.0:9090", None, {"HOSTNAME": "pko-7d9f-abc"}, "pko-7d9f-abc:9090"),
    ("0.0.0.0:9090", None, {}, "machine:9090"),
    ("127.0.0.1:9091", None, {}, "127.0.0.1:9091"),
    ("[::]:9090", None, {}, "[::]:9090"),
    (":9090", None, {"PROGRAM_FS_ADV_ADDR": "pko.ops.svc:9090"}, "pko.ops.svc:9090"),
    (":9090", "flag.example:80", {"PROGRAM_FS_ADV_ADDR": "env.example:80"}, "flag.example:80"),
])
def test_advertised_address(listen: str, explicit: str | None, env: dict[str, str], expected: str) -> None:
    assert address.advertised_address(listen, explicit, env, _hostname) == expected


def test_listen_addresses() -> None:
    assert address.listen_address(None, {}) == ":9090"
    assert address.listen_address(None, {"PROGRAM_FS_ADDR": ":8000"}) == ":8000"
    assert address.listen_address("127.0.0.1:1", {"PROGRAM_FS_ADDR": ":8000"}) == "127.0.0.1:1"
