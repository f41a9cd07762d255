"""The agent's ready pipe (pko.protocol.ready): the runtime hears whole lines however the bytes arrive, and the end
of the stream once the agent's end is closed; the agent says each step, closes its end once it listens, keeps the
pipe from the processes it starts, and goes on when nobody listens any more."""

from __future__ import annotations

import asyncio
import os

import pytest

from pko.protocol import ready


async def test_lines_are_whole_however_the_bytes_arrive_and_the_end_is_heard() -> None:
    said, say = os.pipe()
    lines = ready.Lines(said)
    try:
        os.write(say, b"fetc")
        pending = asyncio.ensure_future(lines.next())
        await asyncio.sleep(0.01)
        assert not pending.done()  # half a line is not a line
        os.write(say, b"hed\nlisten")
        assert await asyncio.wait_for(pending, 5) == ready.FETCHED
        os.write(say, b"ing\n")
        assert await asyncio.wait_for(lines.next(), 5) == ready.LISTENING
        os.close(say)
        assert await asyncio.wait_for(lines.next(), 5) == b""
        assert await asyncio.wait_for(lines.next(), 5) == b""  # and stays ended
    finally:
        lines.close()


async def test_half_a_line_left_at_the_end_is_dropped() -> None:
    said, say = os.pipe()
    lines = ready.Lines(said)
    os.write(say, b"listen")
    os.close(say)
    try:
        assert await asyncio.wait_for(lines.next(), 5) == b""
    finally:
        lines.close()


def test_the_teller_says_each_step_and_closes_its_end_once_it_listens() -> None:
    said, say = os.pipe()
    os.set_inheritable(say, True)
    teller = ready.Teller(say)
    assert not os.get_inheritable(say)  # the CLI and the program the agent starts never hold it
    teller.fetched()
    teller.listening()
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(say)
    teller.listening()  # once closed, saying more does nothing
    assert os.read(said, 100) == ready.FETCHED + ready.LISTENING
    assert os.read(said, 100) == b""
    os.close(said)


def test_the_teller_goes_on_without_a_pipe_or_a_reader() -> None:
    ready.Teller(None).listening()
    said, say = os.pipe()
    os.close(said)
    teller = ready.Teller(say)
    teller.fetched()  # EPIPE (SIGPIPE is ignored under Python): the agent goes on
    teller.listening()
    assert teller.fd is None
