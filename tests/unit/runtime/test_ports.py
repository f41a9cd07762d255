"""free_port picks listener ports below the ephemeral range, never one that is taken, and never one it handed out a
moment ago; the test bed's ports are the same picker."""

from __future__ import annotations

import socket

import pytest

from pko.runtime import ports
from pko.testing import ports as testbed_ports


def test_a_port_is_below_the_ephemeral_range_and_bindable() -> None:
    port = ports.free_port()
    assert ports.LOW <= port <= ports.HIGH
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        assert port < int(f.read().split()[0])  # outgoing connections never take it
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def test_a_taken_port_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        picks = iter([taken, taken])  # the first two picks hit the held port, then random ones
        randint = ports._pick.randint
        monkeypatch.setattr(ports._pick, "randint", lambda low, high: next(picks, None) or randint(low, high))
        assert ports.free_port() != taken
        assert next(picks, None) is None  # both taken picks were tried and refused


def test_a_port_handed_out_is_not_handed_out_again_while_its_caller_has_not_bound_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Callers pick several ports before anything binds them (an operator's health, metrics and file-server ports):
    the bind check alone passed the same port twice, and the operator's second listener failed to start."""
    first = ports.free_port()
    picks = iter([first, first])  # the generator draws the same port again, twice
    randint = ports._pick.randint
    monkeypatch.setattr(ports._pick, "randint", lambda low, high: next(picks, None) or randint(low, high))
    second = ports.free_port()
    assert second != first
    assert next(picks, None) is None  # the repeat was drawn and refused, not skipped by luck


def test_the_test_bed_and_the_local_runtime_draw_from_one_memory() -> None:
    """An operator the tests run in-process starts its `local` agents on ports of the same picker as the test bed's
    listeners, so neither is handed a port the other picked and has not bound yet."""
    assert testbed_ports.free_port is ports.free_port
    handed = testbed_ports.free_port()
    assert handed in ports._handed
