"""The operator's event loop: uvloop where installed, asyncio when asked, and a clear refusal of anything else."""

from __future__ import annotations

import asyncio

import pytest

from pko.runtime import eventloop


def test_uvloop_where_it_is_installed_and_asyncio_otherwise() -> None:
    assert eventloop.choose({}, uvloop_installed=True) == "uvloop"
    assert eventloop.choose({}, uvloop_installed=False) == "asyncio"
    assert eventloop.choose({"PKO_EVENT_LOOP": ""}, uvloop_installed=True) == "uvloop"


def test_the_environment_chooses() -> None:
    assert eventloop.choose({"PKO_EVENT_LOOP": "asyncio"}, uvloop_installed=True) == "asyncio"
    assert eventloop.choose({"PKO_EVENT_LOOP": " UVLoop "}, uvloop_installed=True) == "uvloop"


@pytest.mark.parametrize(("value", "installed", "message"), [
    ("uvloop", False, "PKO_EVENT_LOOP=uvloop, but uvloop is not installed"),
    ("tokio", True, "PKO_EVENT_LOOP must be 'uvloop' or 'asyncio', not 'tokio'"),
])
def test_a_loop_it_cannot_run_is_refused(value: str, installed: bool, message: str) -> None:
    with pytest.raises(eventloop.EventLoopError, match=message):
        eventloop.choose({"PKO_EVENT_LOOP": value}, uvloop_installed=installed)


async def _which() -> str:
    return eventloop.name_of(asyncio.get_running_loop())


def test_run_runs_on_the_loop_chosen() -> None:
    assert eventloop.run(_which(), env={}) == "uvloop"  # installed with pko (pyproject.toml)
    assert eventloop.run(_which(), env={"PKO_EVENT_LOOP": "asyncio"}) == "asyncio"


def test_run_refuses_before_it_starts_the_coroutine() -> None:
    coroutine = _which()
    with pytest.raises(eventloop.EventLoopError):
        eventloop.run(coroutine, env={"PKO_EVENT_LOOP": "nope"})
    assert coroutine.cr_frame is None  # closed, never started: no "never awaited" warning
