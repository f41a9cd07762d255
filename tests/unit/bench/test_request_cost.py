"""`python -m bench.requestcost`: its figures are a request's share, in milliseconds, and bad options are refused."""

from __future__ import annotations

import os
import time

import pytest

from bench import requestcost


def test_a_cost_is_shown_per_request_in_milliseconds() -> None:
    cost = requestcost.Cost("create", requests=400, cpu=0.36, wall=0.8, server=1.2)
    assert cost.line().split() == ["create", "0.90", "2.00", "3.00"]
    text = requestcost.report([cost, requestcost.Cost("get", 10, 0.007, 0.015)])
    assert text.splitlines()[1].split() == ["request", "CPU", "ms", "wall", "ms", "server", "ms"]
    assert text.splitlines()[-1].split() == ["get", "0.70", "1.50", "0.00"]


def test_a_process_cpu_is_read_from_proc_and_a_gone_one_counts_nothing() -> None:
    before = requestcost.cpu_of([os.getpid()])
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    assert requestcost.cpu_of([os.getpid()]) >= before + 0.03
    assert requestcost.cpu_of([2 ** 22 + 1]) == 0.0  # above pid_max: no such process


def test_no_requests_is_refused_before_a_control_plane_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        requestcost.main(["--requests", "0"])
    assert exited.value.code == 2
    assert "--requests must be at least 1" in capsys.readouterr().err
