"""`python -m bench.requestcost`: its figures are a request's share, in milliseconds, and bad options are refused."""

from __future__ import annotations

import pytest

from bench import requestcost


def test_a_cost_is_shown_per_request_in_milliseconds() -> None:
    cost = requestcost.Cost("create", requests=400, cpu=0.36, wall=0.8)
    assert cost.line().split() == ["create", "0.90", "2.00"]
    text = requestcost.report([cost, requestcost.Cost("get", 10, 0.007, 0.015)])
    assert text.splitlines()[1].split() == ["request", "CPU", "ms", "wall", "ms"]
    assert text.splitlines()[-1].split() == ["get", "0.70", "1.50"]


def test_no_requests_is_refused_before_a_control_plane_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        requestcost.main(["--requests", "0"])
    assert exited.value.code == 2
    assert "--requests must be at least 1" in capsys.readouterr().err
