"""The operator's agent tokens (connect.Connector.token): a kept token is handed out while it is fresh, and the
expired ones are dropped at most every PRUNE_EVERY, not at every connection (a look through a fleet's thousand
tokens each time)."""

from __future__ import annotations

import datetime

from pko.controllers import connect
from pko.kube import tokens

START = datetime.datetime(2026, 12, 6, 12, 0, tzinfo=datetime.UTC)


class _Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime.datetime:
        return self.now


async def test_expired_tokens_are_dropped_at_most_every_prune_every() -> None:
    clock = _Clock()
    connector = connect.Connector(client=None, clock=clock)  # type: ignore[arg-type]  # never asks: tokens are kept
    fresh = tokens.Token("fresh-token", START + datetime.timedelta(hours=1))
    connector._tokens = {"ws.ns": fresh, "old-1": tokens.Token("x", START - datetime.timedelta(seconds=1))}
    assert await connector.token("ws.ns") == "fresh-token"
    assert set(connector._tokens) == {"ws.ns"}  # the first look drops what expired

    connector._tokens["old-2"] = tokens.Token("y", START)
    clock.now = START + connect.PRUNE_EVERY - datetime.timedelta(seconds=1)
    assert await connector.token("ws.ns") == "fresh-token"
    assert set(connector._tokens) == {"ws.ns", "old-2"}  # not looked at again so soon

    clock.now = START + connect.PRUNE_EVERY
    assert await connector.token("ws.ns") == "fresh-token"
    assert set(connector._tokens) == {"ws.ns"}


async def test_a_clock_set_back_prunes_at_once() -> None:
    clock = _Clock()
    connector = connect.Connector(client=None, clock=clock)  # type: ignore[arg-type]
    connector._tokens = {"ws.ns": tokens.Token("fresh-token", START + datetime.timedelta(hours=1))}
    await connector.token("ws.ns")  # looked at START
    clock.now = START - datetime.timedelta(hours=2)  # the clock set back: what expired by then goes now
    connector._tokens["old"] = tokens.Token("y", START - datetime.timedelta(hours=3))
    assert await connector.token("ws.ns") == "fresh-token"
    assert set(connector._tokens) == {"ws.ns"}
